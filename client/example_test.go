package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/raftpace/raftpace/client"
	"github.com/raftpace/raftpace/node"
)

// A worker embeds a node and paces its events through a client. Here the
// cluster is a single node; a fleet starts one per worker process with the
// same BootstrapExpect and Join addresses.
func Example() {
	dir, err := os.MkdirTemp("", "raftpace-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	n, err := node.New(node.Config{
		NodeID:          "worker-1",
		DataDir:         dir,
		BindAddr:        "127.0.0.1:0",
		GossipBindAddr:  "127.0.0.1:0",
		BootstrapExpect: 1,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := n.WaitForLeader(ctx); err != nil {
		log.Fatal(err)
	}

	c := client.New(n)
	if err := c.SetLimit(ctx, "image-host", client.Limit{Rate: 10, Burst: 1}); err != nil {
		log.Fatal(err)
	}

	start := time.Now()
	for i := 0; i < 5; i++ {
		if err := c.Wait(ctx, "image-host"); err != nil {
			log.Fatal(err)
		}
		// fetch(...) goes here
	}
	fmt.Println("5 events at 10/s took at least 400ms:", time.Since(start) >= 400*time.Millisecond)

	// Shed instead of queueing: the next slot is ~100ms away.
	_, err = c.Reserve(ctx, "image-host", time.Millisecond)
	fmt.Println("shed:", errors.Is(err, client.ErrLimitExceeded))

	_, err = c.Reserve(ctx, "no-such-key", time.Second)
	fmt.Println("unknown key refused:", errors.Is(err, client.ErrUnknownKey))
	// Output:
	// 5 events at 10/s took at least 400ms: true
	// shed: true
	// unknown key refused: true
}

// A worker's HTTP client paced by the fleet: each request waits for its
// host's rate, takes a slot if the host has a concurrency cap, and a 429 or
// 503 pauses the host for every worker.
func ExampleTransport() {
	var n *node.Node // the node this worker embeds (see Example)
	c := client.New(n)

	ctx := context.Background()
	// Declare this worker's policy; a conflicting one already in the
	// cluster is reported, not overwritten.
	if err := c.Register(ctx, "api.example.com", client.Limit{Rate: 5, Burst: 1}); err != nil {
		log.Fatal(err)
	}
	if err := c.RegisterCap(ctx, "api.example.com", 4); err != nil {
		log.Fatal(err)
	}

	hc := &http.Client{Transport: client.Transport(nil, c,
		client.SlotTTL(20*time.Second),
		client.OnError(func(key string, err error) { log.Printf("pausing %s: %v", key, err) }),
	)}
	resp, err := hc.Get("https://api.example.com/items")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close() // gives the concurrency slot back
}

func ExampleRefusalPolicy_Delay() {
	now := time.Date(2025, time.March, 4, 12, 0, 0, 0, time.UTC)
	var p client.RefusalPolicy // defaults: Max 10m, backoff 1s doubling to 1m

	h := http.Header{"Retry-After": {"120"}}
	fmt.Println(p.Delay(h, now, 1))
	h = http.Header{"Retry-After": {"Tue, 04 Mar 2025 12:00:30 GMT"}}
	fmt.Println(p.Delay(h, now, 1))
	h = http.Header{"Retry-After": {"soon"}} // malformed: backoff
	fmt.Println(p.Delay(h, now, 1))
	fmt.Println(p.Delay(h, now, 3))
	fmt.Println(p.Delay(h, now, 50))
	// Output:
	// 2m0s true
	// 30s true
	// 1s false
	// 4s false
	// 1m0s false
}
