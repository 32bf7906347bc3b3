package redistest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy on a free loopback port that forwards every
// connection to a target address and can cut all of them at once, or
// black-hole them (stop forwarding while keeping every socket open, as a
// peer that stops answering does), to simulate network failures between a
// client and Redis. Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // cancelled by Close; aborts dials in flight
	cancel context.CancelFunc
	wg     sync.WaitGroup // accept loop, dialers and copiers

	mu     sync.Mutex
	closed bool
	refuse bool
	hole   bool // black-holed: bytes are read and dropped, never forwarded
	nextID int
	conns  map[int]*proxyConn
	// holdMatch (set by HoldNext) picks the next connection to hold; held
	// are the connections held until Release.
	holdMatch func([]byte) bool
	held      []*proxyConn
	// cutMatch (set by CutReplies) picks the writes whose replies are
	// lost.
	cutMatch func([]byte) bool
}

// proxyConn is one proxied connection: the accepted client side and the
// dialled target side.
type proxyConn struct {
	client, server net.Conn
	once           sync.Once

	// Of a connection held by HoldNext, guarded by mu (which also orders
	// the writes to server): held while the client's bytes are kept in
	// buf; clientGone once the client closed its side meanwhile; answered
	// is closed when the server sends anything, or its side ends, after
	// Release forwarded buf.
	mu         sync.Mutex
	held       bool
	buf        []byte
	clientGone bool
	released   bool
	answered   chan struct{}
	answerOnce sync.Once
}

func (pc *proxyConn) close() {
	pc.once.Do(func() {
		pc.client.Close()
		pc.server.Close()
	})
}

// NewProxy starts a proxy on a free loopback port forwarding to target
// ("host:port"). t.Cleanup calls [Proxy.Close], which closes the listener and
// every connection and joins all the proxy's goroutines.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target: target,
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		conns:  make(map[int]*proxyConn),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's listening address, "127.0.0.1:port". Point
// clients here instead of at the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// CutAll closes every live proxied connection, both the client side and the
// target side. When it returns, [Proxy.Conns] is 0 (until new connections
// arrive). New connections are still accepted and forwarded.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	cut := p.conns
	p.conns = make(map[int]*proxyConn)
	p.mu.Unlock()
	for _, pc := range cut {
		pc.close()
	}
}

// SetRefuse sets whether new connections are refused: while on, each new
// connection is accepted and closed at once, without dialling the target.
// Live connections are not affected (use [Proxy.CutAll]).
func (p *Proxy) SetRefuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// BlackHole stops forwarding in both directions on every connection, live
// and new, while keeping every socket open: a client's writes succeed and
// its reads wait for an answer that never comes, as when a network path or a
// peer stops answering without resetting anything. Bytes sent meanwhile are
// dropped. [Proxy.Restore] ends it.
func (p *Proxy) BlackHole() {
	p.mu.Lock()
	p.hole = true
	p.mu.Unlock()
}

// Restore ends a [Proxy.BlackHole]: it cuts every connection that lived
// through it (their byte streams lost data, so they cannot be resumed) and
// forwards new connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.hole = false
	p.mu.Unlock()
	p.CutAll()
}

// HoldNext holds the next connection, live or new, on which the client sends
// bytes that match accepts: from that write on, nothing the client sends on
// it is forwarded, but all of it is kept, also after the client gives up and
// closes its side (the server's side stays open), until [Proxy.Release]
// forwards it. That is a network that delays a request past the client's
// timeout and delivers it later, as TCP does with a retransmission after a
// partition heals: the server then runs a command whose client is gone.
// Only one connection is held per call.
func (p *Proxy) HoldNext(match func(written []byte) bool) {
	p.mu.Lock()
	p.holdMatch = match
	p.mu.Unlock()
}

// CutReplies makes every later write, on any connection, whose bytes match
// lose its reply, until CutReplies(nil): the write is forwarded to the
// server, and the client's side of that connection is closed at once,
// before anything the server answers reaches it; the server's side stays
// open until the server answered (so it runs what it was sent), then is
// closed. That is a connection reset after a request left, as a proxy or a
// load balancer does: the client sees an error, and the server ran the
// command (and each retry of it).
func (p *Proxy) CutReplies(match func(written []byte) bool) {
	p.mu.Lock()
	p.cutMatch = match
	p.mu.Unlock()
}

// cutIfMatch reports whether data, just forwarded on pc, is a write
// CutReplies cuts; it then closes pc's client side. Call with pc.mu held.
func (p *Proxy) cutIfMatch(pc *proxyConn, data []byte) bool {
	p.mu.Lock()
	match := p.cutMatch
	if match == nil || !match(data) {
		p.mu.Unlock()
		return false
	}
	p.mu.Unlock()
	pc.clientGone = true
	pc.released = true // pipeDown: the next answer marks it answered
	_ = pc.client.Close()
	return true
}

// Release forwards what every held connection kept, in order, and waits
// (up to 10s each) until the server answered it or closed its side; a held
// connection whose client is still there forwards normally from then on,
// one whose client closed is closed once answered. It returns how many
// connections it released.
func (p *Proxy) Release() int {
	p.mu.Lock()
	held := p.held
	p.held = nil
	p.holdMatch = nil
	p.mu.Unlock()
	for _, pc := range held {
		pc.mu.Lock()
		buf := pc.buf
		pc.buf, pc.held, pc.released = nil, false, true
		_, _ = pc.server.Write(buf)
		pc.mu.Unlock()
	}
	for _, pc := range held {
		select {
		case <-pc.answered:
		case <-time.After(10 * time.Second):
		}
		pc.mu.Lock()
		gone := pc.clientGone
		pc.mu.Unlock()
		if gone {
			pc.close()
		}
	}
	return len(held)
}

// holdIfMatch reports whether pc is held (now, or since earlier): data is
// then kept instead of forwarded. Call with pc.mu held.
func (p *Proxy) holdIfMatch(pc *proxyConn, data []byte) bool {
	if pc.held {
		pc.buf = append(pc.buf, data...)
		return true
	}
	p.mu.Lock()
	match := p.holdMatch
	if match == nil || !match(data) {
		p.mu.Unlock()
		return false
	}
	p.holdMatch = nil
	p.held = append(p.held, pc)
	p.mu.Unlock()
	pc.held = true
	pc.buf = append(pc.buf, data...)
	return true
}

// pipeUp copies the client's bytes to the server until either side fails
// (dropping them while the proxy is black-holed), keeping
// them instead while the connection is held (HoldNext). It reports whether
// the connection must stay open: the client closed while it was held.
func (p *Proxy) pipeUp(pc *proxyConn) (keep bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := pc.client.Read(buf)
		if n > 0 {
			pc.mu.Lock()
			if !p.holdIfMatch(pc, buf[:n]) && !p.blackHoled() {
				if _, werr := pc.server.Write(buf[:n]); werr != nil {
					pc.mu.Unlock()
					return false
				}
				if p.cutIfMatch(pc, buf[:n]) {
					pc.mu.Unlock()
					return true // the server's side stays until it answered (pipeDown)
				}
			}
			pc.mu.Unlock()
		}
		if err != nil {
			pc.mu.Lock()
			defer pc.mu.Unlock()
			if pc.held {
				pc.clientGone = true
				return true
			}
			return false
		}
	}
}

// pipeDown copies the server's bytes to the client until either side fails
// (dropping them while the proxy is black-holed), and marks
// a released connection answered.
func (p *Proxy) pipeDown(pc *proxyConn) {
	defer pc.markAnswered()
	buf := make([]byte, 32<<10)
	for {
		n, err := pc.server.Read(buf)
		if n > 0 {
			pc.mu.Lock()
			released, gone, held := pc.released, pc.clientGone, pc.held
			pc.mu.Unlock()
			if released {
				pc.markAnswered()
			}
			if gone && !held && released {
				return // cut after a write (CutReplies): answered, so closed
			}
			if !p.blackHoled() {
				if _, werr := pc.client.Write(buf[:n]); werr != nil {
					pc.mu.Lock()
					gone := pc.clientGone
					pc.mu.Unlock()
					if !gone {
						return
					}
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func (pc *proxyConn) markAnswered() { pc.answerOnce.Do(func() { close(pc.answered) }) }

func (p *Proxy) blackHoled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hole
}

// Conns returns the number of live proxied connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops the proxy: it closes the listener and every connection and
// waits for all of the proxy's goroutines to return. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	if !already {
		p.cancel()
		p.ln.Close()
		p.CutAll()
	}
	p.wg.Wait()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			// Transient accept error (e.g. EMFILE): back off briefly.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.mu.Lock()
		drop := p.closed || p.refuse
		if !drop {
			p.wg.Add(1)
		}
		p.mu.Unlock()
		if drop {
			c.Close()
			continue
		}
		go p.serve(c)
	}
}

// serve dials the target for the accepted client and copies both ways until
// either side ends or the connection is cut.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	var d net.Dialer
	dctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	server, err := d.DialContext(dctx, "tcp", p.target)
	cancel()
	if err != nil {
		client.Close()
		return
	}
	pc := &proxyConn{client: client, server: server, answered: make(chan struct{})}

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pc.close()
		return
	}
	id := p.nextID
	p.nextID++
	p.conns[id] = pc
	p.wg.Add(1)
	p.mu.Unlock()

	go func() {
		defer p.wg.Done()
		if !p.pipeUp(pc) {
			p.drop(id, pc)
		}
	}()
	p.pipeDown(pc)
	p.drop(id, pc)
}

// drop closes pc and forgets it, unless CutAll already did.
func (p *Proxy) drop(id int, pc *proxyConn) {
	pc.close()
	p.mu.Lock()
	if p.conns[id] == pc {
		delete(p.conns, id)
	}
	p.mu.Unlock()
}
