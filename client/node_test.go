package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/raftpace/raftpace/node"
)

// Transport against a real single-node cluster: the refusal pauses the key
// in the node, the next request is held (or shed), and slots come back.
func TestTransport_RealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a raft node")
	}
	n, err := node.New(node.Config{
		NodeID:          "client-test",
		DataDir:         t.TempDir(),
		BindAddr:        "127.0.0.1:0",
		GossipBindAddr:  "127.0.0.1:0",
		BootstrapExpect: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}

	srv := newRefusingServer(t, reply{status: 200, body: "ok"}, reply{status: 429, retryAfter: "2"})
	u, _ := url.Parse(srv.URL)
	key := u.Host
	c := New(n)
	if err := c.Register(ctx, key, Limit{Rate: 100, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	if err := c.RegisterCap(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.RegisterCap(ctx, key, 2); !errors.Is(err, ErrPolicyConflict) {
		t.Fatalf("got %v, want ErrPolicyConflict", err)
	}
	hc := &http.Client{Transport: Transport(nil, c)}

	for i, want := range []int{200, 429} {
		resp, err := hc.Get(srv.URL)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("request %d: status %d, want %d", i, resp.StatusCode, want)
		}
		if inUse := n.SlotsInUse()[key]; inUse != 0 {
			t.Errorf("request %d: %d slots still held after the body was closed", i, inUse)
		}
	}
	if p := n.PausedFor(key); p <= time.Second || p > 2*time.Second {
		t.Errorf("node has %q paused for %v, want about 2s", key, p)
	}

	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	req, _ := http.NewRequestWithContext(short, http.MethodGet, srv.URL, nil)
	if _, err := hc.Do(req); !errors.Is(err, ErrPaused) {
		t.Fatalf("got %v, want ErrPaused while the key is paused", err)
	}
	if hits := srv.hits.Load(); hits != 2 {
		t.Errorf("server saw %d requests, want 2", hits)
	}
	if inUse := n.SlotsInUse()[key]; inUse != 0 {
		t.Errorf("%d slots held after a refused request", inUse)
	}

	// Without a short deadline the request waits the pause out.
	start := time.Now()
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if el := time.Since(start); el < time.Second {
		t.Errorf("sent after %v, before the pause ended", el)
	}
}
