package redistest

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ClientStats reads CLIENT LIST through c and returns how many connections
// the server has besides the one that asked, and how many of those are
// blocked in a command (flag b: a blocking XREAD, XREADGROUP, BLPOP...).
func ClientStats(ctx context.Context, c redis.Cmdable) (conns, blocked int, err error) {
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		if strings.Contains(line, "cmd=client|list") {
			continue // the asking connection
		}
		conns++
		for _, f := range strings.Fields(line) {
			if flags, ok := strings.CutPrefix(f, "flags="); ok && strings.Contains(flags, "b") {
				blocked++
			}
		}
	}
	return conns, blocked, nil
}
