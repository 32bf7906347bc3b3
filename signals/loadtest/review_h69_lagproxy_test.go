package loadtest_test

import (
	"context"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// lagProxy is a TCP proxy whose black hole behaves as TCP does when a
// network path stops answering and later heals (review h69): while the
// hole lasts nothing crosses, but the bytes of every connection that was
// open when it began are kept, not dropped, in both directions, also after
// the client gave up and closed its side (its kernel keeps retransmitting
// them, then its FIN); when the path heals, each such connection's bytes
// reach the server (and the server's replies the client, if it is still
// there) at its own time, up to maxLag later (each connection's
// retransmission timer has backed off by its own amount), so Redis runs
// the commands a cut-off client wrote into the hole after the client went
// on with new connections. A connection opened during the hole never gets
// through (its handshake is lost; its bytes are dropped) and is closed when
// the hole ends. redistest.Proxy's BlackHole drops the bytes and its
// Restore cuts every connection, so none of those commands ever runs.
type lagProxy struct {
	target string
	ln     net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	hole   bool
	mute   bool // Mute: the server's bytes are dropped, the client's go through
	conns  map[*lagConn]struct{}
}

type lagConn struct {
	client, server net.Conn // server is nil for a connection opened in the hole
	once           sync.Once

	mu         sync.Mutex
	dead       bool // opened in the hole: nothing crosses, closed at the heal
	held       bool // in the hole (or after it, until its bytes came in)
	up, down   []byte
	clientGone bool
	serverGone bool
	released   bool
	scheduled  bool // a release is due (Heal)
	answered   chan struct{}
	ansOnce    sync.Once
}

func (c *lagConn) close() {
	c.once.Do(func() {
		c.client.Close()
		if c.server != nil {
			c.server.Close()
		}
	})
}

func newLagProxy(t testing.TB, target string) *lagProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &lagProxy{target: target, ln: ln, ctx: ctx, cancel: cancel, conns: map[*lagConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

func (p *lagProxy) Addr() string { return p.ln.Addr().String() }

func (p *lagProxy) accept() {
	defer p.wg.Done()
	for {
		cl, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			cl.Close()
			return
		}
		c := &lagConn{client: cl, answered: make(chan struct{})}
		if p.hole || p.mute {
			c.dead = true
			p.conns[c] = struct{}{}
			p.wg.Add(1)
			p.mu.Unlock()
			go func() { // read and drop until closed
				defer p.wg.Done()
				buf := make([]byte, 32<<10)
				for {
					if _, err := cl.Read(buf); err != nil {
						c.close()
						return
					}
				}
			}()
			continue
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c)
	}
}

func (p *lagProxy) serve(c *lagConn) {
	defer p.wg.Done()
	var d net.Dialer
	dctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	srv, err := d.DialContext(dctx, "tcp", p.target)
	cancel()
	if err != nil {
		c.client.Close()
		return
	}
	c.server = srv
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close()
		return
	}
	if p.hole {
		c.held = true
	}
	p.conns[c] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := c.client.Read(buf)
			if n > 0 {
				c.mu.Lock()
				if c.held {
					c.up = append(c.up, buf[:n]...)
				} else if _, werr := c.server.Write(buf[:n]); werr != nil {
					c.mu.Unlock()
					c.close()
					return
				}
				c.mu.Unlock()
			}
			if err != nil {
				c.mu.Lock()
				if c.held {
					// Its kernel still retransmits what it wrote: the
					// server gets it (then the FIN) when the path heals.
					c.clientGone = true
					c.mu.Unlock()
					return
				}
				c.mu.Unlock()
				c.close()
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := srv.Read(buf)
		if n > 0 {
			p.mu.Lock()
			muted := p.mute
			p.mu.Unlock()
			c.mu.Lock()
			switch {
			case muted:
				// dropped: the path back to the client is dead
			case c.held:
				c.down = append(c.down, buf[:n]...)
			case c.clientGone:
				c.ansOnce.Do(func() { close(c.answered) })
			default:
				_, _ = c.client.Write(buf[:n])
			}
			c.mu.Unlock()
		}
		if err != nil {
			c.ansOnce.Do(func() { close(c.answered) })
			c.mu.Lock()
			held := c.held
			c.serverGone = true
			c.mu.Unlock()
			if !held {
				c.close()
			}
			return
		}
	}
}

// Hole starts the black hole.
func (p *lagProxy) Hole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hole = true
	for c := range p.conns {
		c.mu.Lock()
		if !c.dead {
			c.held = true
		}
		c.mu.Unlock()
	}
}

// Heal ends the hole: connections opened in it are closed at once, and
// each one held delivers what it kept after its own delay, uniform in
// [0, maxLag). It returns at once; the deliveries are over when the
// returned channel closes.
func (p *lagProxy) Heal(maxLag time.Duration) <-chan struct{} {
	p.mu.Lock()
	p.hole = false
	var held []*lagConn
	for c := range p.conns {
		c.mu.Lock()
		dead, h := c.dead, c.held
		c.mu.Unlock()
		switch {
		case dead:
			delete(p.conns, c)
			c.close()
		case h:
			c.mu.Lock()
			if !c.scheduled {
				c.scheduled = true
				held = append(held, c)
			}
			c.mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	for _, c := range held {
		lag := time.Duration(rand.Int64N(int64(maxLag)))
		wg.Add(1)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer wg.Done()
			select {
			case <-time.After(lag):
			case <-p.ctx.Done():
				return
			}
			p.release(c)
		}()
	}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

func (p *lagProxy) release(c *lagConn) {
	p.mu.Lock()
	c.mu.Lock()
	inHole := p.hole
	p.mu.Unlock()
	c.scheduled = false
	if inHole {
		// Another hole began before this connection's bytes got
		// through: they wait for its end too.
		c.mu.Unlock()
		return
	}
	up, down := c.up, c.down
	c.up, c.down, c.held, c.released = nil, nil, false, true
	gone := c.clientGone
	if c.serverGone {
		c.mu.Unlock()
		c.close()
		return
	}
	if len(up) > 0 {
		_, _ = c.server.Write(up)
	}
	if !gone && len(down) > 0 {
		_, _ = c.client.Write(down)
	}
	c.mu.Unlock()
	if !gone {
		return
	}
	// The client left: the server runs what came in, answers into a
	// closed socket (RST) and closes.
	if len(up) > 0 {
		select {
		case <-c.answered:
		case <-time.After(3 * time.Second):
		case <-p.ctx.Done():
		}
	}
	c.close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Mute starts a one-way black hole: what clients send still reaches the
// server, which runs it, but nothing the server sends reaches them (a
// return path that died: asymmetric routing, a firewall or NAT that drops
// one direction). A connection opened meanwhile never gets through (its
// handshake's answer is lost). Unmute ends it and cuts every connection
// (their byte streams lost data).
func (p *lagProxy) Mute() {
	p.mu.Lock()
	p.mute = true
	p.mu.Unlock()
}

// Unmute ends Mute.
func (p *lagProxy) Unmute() {
	p.mu.Lock()
	p.mute = false
	conns := p.conns
	p.conns = map[*lagConn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		c.close()
	}
}

// Conns is how many connections the proxy holds (live, held or dead).
func (p *lagProxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

func (p *lagProxy) Close() {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	conns := p.conns
	p.conns = map[*lagConn]struct{}{}
	p.mu.Unlock()
	if !already {
		p.cancel()
		p.ln.Close()
	}
	for c := range conns {
		c.close()
	}
	p.wg.Wait()
}
