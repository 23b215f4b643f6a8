package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
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
