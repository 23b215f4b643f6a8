package batch

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/node/wire"
)

// fakePacer grants "now:*" at once, holds "later:*" until released, and
// refuses "far:*" (a slot past the maximum wait).
type fakePacer struct {
	clock   func() int64
	release chan struct{}
	leading atomic.Bool
}

func (f *fakePacer) TryLease(key, holder string, count int, maxWait time.Duration) (wire.Lease, int64, error) {
	switch key[:3] {
	case "now":
		return wire.Lease{Base: int64(time.Second), Spacing: int64(time.Second), Count: 1}, f.clock(), nil
	case "far":
		return wire.Lease{}, 0, &raftpace.LimitExceededError{Key: key, Wait: time.Hour, MaxWait: maxWait}
	}
	return wire.Lease{}, 0, wire.ErrWouldWait
}

func (f *fakePacer) LeaseAt(ctx context.Context, done <-chan struct{}, key, holder string, count int, maxWait time.Duration) (wire.Lease, int64, error) {
	entry := f.clock()
	select {
	case <-f.release:
	case <-ctx.Done():
		return wire.Lease{}, 0, ctx.Err()
	}
	now := f.clock()
	return wire.Lease{Base: int64(time.Second), Spacing: int64(time.Second), Count: 1, Held: now - entry}, now, nil
}

func (f *fakePacer) LeaseAnswer(l wire.Lease, err error) wire.LeaseResp {
	var le *raftpace.LimitExceededError
	if errors.As(err, &le) {
		return wire.LeaseResp{Code: wire.CodeLimitExceeded, Wait: le.Wait, Msg: wire.ErrMsg(err)}
	}
	return wire.LeaseResp{Code: wire.CodeFor(err), Lease: l, Msg: wire.ErrMsg(err)}
}

func (f *fakePacer) IsLeading() bool { return f.leading.Load() }

type rig struct {
	pacer  *fakePacer
	srv    *Server
	cli    *Client
	leader atomic.Pointer[string]
	calls  atomic.Int64
	old    atomic.Bool // the leader knows no MethodLeases
}

func newRig(t *testing.T) *rig {
	t.Helper()
	start := time.Now()
	clock := func() int64 { return int64(time.Since(start)) }
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); wg.Wait() })
	rg := &rig{pacer: &fakePacer{clock: clock, release: make(chan struct{})}}
	rg.pacer.leading.Store(true)
	l := "L"
	rg.leader.Store(&l)
	rg.srv = NewServer(Grants{Pacer: rg.pacer, Paused: func(string) time.Duration { return 0 }, Now: clock, Epoch: 1, Done: ctx.Done(), WG: &wg})
	call := func(ctx context.Context, method uint8, req []byte, maxWait time.Duration) ([]byte, string, error) {
		rg.calls.Add(1)
		leader := *rg.leader.Load()
		if method == wire.MethodLeases && rg.old.Load() {
			return nil, leader, ErrNoBatches
		}
		if method == wire.MethodLease {
			m, err := wire.DecodeLeaseReq(req)
			if err != nil {
				return nil, leader, err
			}
			l, _, err := rg.pacer.TryLease(m.Key, m.Holder, m.Count, m.MaxWait)
			return rg.pacer.LeaseAnswer(l, err).Encode(), leader, nil
		}
		cctx, cancel := context.WithTimeout(ctx, wire.LeaderCallTimeout(maxWait))
		defer cancel()
		return rg.srv.Serve(cctx, req), leader, nil
	}
	rg.cli = NewClient("m1", call, clock)
	wg.Add(1)
	go func() { defer wg.Done(); rg.cli.Run(ctx, &wg) }()
	return rg
}

// A request the leader answers at once comes back in its message's reply;
// one that waits on the leader comes back by the poll, when granted; a
// refusal keeps its code and wait. Every lease is placed inside the
// exchange that carried it.
func TestBatch_AnswersNowAndWhenGranted(t *testing.T) {
	rg := newRig(t)
	ctx := context.Background()
	begin := rg.pacer.clock()
	resp, arrived, err := rg.cli.Lease(ctx, "now:a", 1, time.Second)
	if err != nil || resp.Code != wire.CodeOK || resp.Lease.Count != 1 {
		t.Fatalf("now:a = %+v, %v", resp, err)
	}
	if end := rg.pacer.clock(); arrived < begin || arrived > end || resp.Lease.Held < 0 || begin+resp.Lease.Held > arrived {
		t.Fatalf("placed at %d held %d, outside the call [%d, %d]", arrived, resp.Lease.Held, begin, end)
	}
	if resp, _, err := rg.cli.Lease(ctx, "far:a", 1, time.Second); err != nil || resp.Code != wire.CodeLimitExceeded || resp.Wait != time.Hour {
		t.Fatalf("far:a = %+v, %v; want CodeLimitExceeded waiting an hour", resp, err)
	}
	got := make(chan wire.LeaseResp, 10)
	for range 10 {
		go func() {
			resp, _, err := rg.cli.Lease(ctx, "later:a", 1, 5*time.Second)
			if err != nil {
				t.Error(err)
			}
			got <- resp
		}()
	}
	select {
	case r := <-got:
		t.Fatalf("a held request answered before its grant: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	close(rg.pacer.release)
	for range 10 {
		select {
		case r := <-got:
			if r.Code != wire.CodeOK || r.Lease.Held < int64(100*time.Millisecond) {
				t.Fatalf("held request: %+v; want granted, held at least 100ms", r)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a granted request never came back")
		}
	}
}

// Requests waiting on a leader that is replaced fail (to be asked of the
// new one) as soon as another leader answers; a leader of an older build
// (no MethodLeases) is asked one request at a time.
func TestBatch_LeaderChangeAndOldLeader(t *testing.T) {
	rg := newRig(t)
	defer close(rg.pacer.release) // the request left on L ends
	ctx := context.Background()
	errs := make(chan error, 1)
	go func() {
		_, _, err := rg.cli.Lease(ctx, "later:b", 1, 5*time.Second)
		errs <- err
	}()
	time.Sleep(50 * time.Millisecond) // it waits on L
	m := "M"
	rg.leader.Store(&m)
	if _, _, err := rg.cli.Lease(ctx, "now:b", 1, time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, wire.ErrRetry) {
			t.Fatalf("request left on the old leader: %v, want ErrRetry", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("a request left on the old leader still waits")
	}
	rg.old.Store(true)
	resp, _, err := rg.cli.Lease(ctx, "now:c", 1, time.Second)
	if err != nil || resp.Code != wire.CodeOK || resp.Lease.Count != 1 {
		t.Fatalf("from a leader of an older build: %+v, %v", resp, err)
	}
}
