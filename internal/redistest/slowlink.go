package redistest

import (
	"net"
	"sync"
	"testing"
	"time"
)

// SlowLink is a TCP proxy on a free loopback port that forwards every
// connection to a target address with a fixed one-way delay in each
// direction: a Redis a network away, with a round trip of at least twice
// the delay (another host or zone: 1-5ms), where every earlier test ran on
// loopback. Each chunk read is forwarded delay after it was read, in order,
// without holding up the chunks read after it, so a pipelined or
// concurrent client sees latency, not a lower throughput. Chain it behind a
// [Proxy] (NewProxy(t, link.Addr())) for cuts and black holes over a slow
// link.
type SlowLink struct {
	ln    net.Listener
	delay time.Duration
	wg    sync.WaitGroup

	mu     sync.Mutex
	closed bool
	conns  []net.Conn
}

// NewSlowLink starts a SlowLink to target ("host:port") with the one-way
// delay oneWay. t.Cleanup closes it, its connections, and joins its
// goroutines.
func NewSlowLink(t testing.TB, target string, oneWay time.Duration) *SlowLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: slow link listen: %v", err)
	}
	s := &SlowLink{ln: ln, delay: oneWay}
	s.wg.Add(1)
	go s.accept(target)
	t.Cleanup(s.Close)
	return s
}

// Addr returns the link's listening address, "127.0.0.1:port".
func (s *SlowLink) Addr() string { return s.ln.Addr().String() }

// URL returns a redis:// URL for database 0 through the link.
func (s *SlowLink) URL() string { return "redis://" + s.Addr() + "/0" }

// Close closes the listener and every connection and waits for the link's
// goroutines. It is idempotent.
func (s *SlowLink) Close() {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	if !already {
		s.ln.Close()
		for _, c := range conns {
			c.Close()
		}
	}
	s.wg.Wait()
}

func (s *SlowLink) accept(target string) {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		srv, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			srv.Close()
			return
		}
		s.conns = append(s.conns, c, srv)
		s.wg.Add(4)
		s.mu.Unlock()
		s.pipe(c, srv)
		s.pipe(srv, c)
	}
}

// chunk is bytes read at a time, due for forwarding delay later.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe forwards from to to with the delay: a reader queues each chunk, a
// writer sends it when due. Either side's end closes both.
func (s *SlowLink) pipe(from, to net.Conn) {
	q := make(chan chunk, 4096)
	go func() {
		defer s.wg.Done()
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := from.Read(buf)
			if n > 0 {
				q <- chunk{b: buf[:n], due: time.Now().Add(s.delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		defer s.wg.Done()
		defer from.Close()
		defer to.Close()
		for c := range q {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := to.Write(c.b); err != nil {
				break
			}
		}
		for range q { // drain until the reader sees its side closed
		}
	}()
}
