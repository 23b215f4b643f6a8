package node_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/timeline"
	"github.com/raftpace/raftpace/node"
	"github.com/raftpace/raftpace/node/nodetest"
)

// A template set once gives every key under it its own limit on every
// node, with no command per key: two keys made by it are each paced at
// the template's rate across three nodes, and counted under the template.
// A key under no template is unknown; the template's own key is no
// event's key.
func TestNode_TemplateKeys(t *testing.T) {
	c := nodetest.New(t, 3)
	ctx := nodetest.Ctx(t, 60*time.Second)
	lim := fsm.Limit{Rate: 40, Burst: 2}
	f := c.Node(c.Followers()[0])
	if err := f.SetLimit(ctx, "tenant:*", lim); err != nil {
		t.Fatal(err)
	}
	nodes := []*node.Node{c.Node(0), c.Node(1), c.Node(2)}
	for _, n := range nodes { // Limit reads what this node applied
		waitFor(t, 5*time.Second, func() bool { got, err := n.Limit(ctx, "tenant:new"); return err == nil && got == lim })
	}
	runCtx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	events := make(map[string][]timeline.Event)
	var mu sync.Mutex
	for _, key := range []string{"tenant:a", "tenant:b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev := load(runCtx, t, nodes, key, 3)
			mu.Lock()
			events[key] = ev
			mu.Unlock()
		}()
	}
	wg.Wait()
	for key, ev := range events {
		checkCeiling(t, ev, key, lim, minUtil)
	}

	if _, err := f.Reserve(ctx, "other", 1, time.Second); !errors.Is(err, raftpace.ErrUnknownKey) {
		t.Errorf("a key under no template: %v, want ErrUnknownKey", err)
	}
	if _, err := f.Reserve(ctx, "tenant:*", 1, time.Second); !errors.Is(err, raftpace.ErrInvalidRequest) {
		t.Errorf("the template's own key: %v, want ErrInvalidRequest", err)
	}
	var counted bool
	for _, kc := range f.Metrics().Keys {
		if kc.Key == "tenant:a" || kc.Key == "tenant:b" {
			t.Errorf("key %s counted on its own; a template's keys count under it", kc.Key)
		}
		counted = counted || kc.Key == "tenant:*" && kc.GrantedEvents > 0
	}
	if !counted {
		t.Error("no events counted under tenant:*")
	}
}
