package redistest

import "time"

// RetryUntil calls f every 20ms until it returns nil or bound has passed.
// It returns how long that took, how many calls failed first, and the last
// error when none succeeded (nil when one did): what a failover test
// measures from a promotion to the first call that works again.
func RetryUntil(bound time.Duration, f func() error) (took time.Duration, failed int, err error) {
	start := time.Now()
	for {
		if err = f(); err == nil {
			return time.Since(start), failed, nil
		}
		failed++
		if time.Since(start) >= bound {
			return time.Since(start), failed, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
