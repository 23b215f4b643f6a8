package pgstore

import (
	"reflect"
	"testing"
	"time"
)

func TestDiscovery(t *testing.T) {
	s := newStore(t, "c1")
	ctx := ctxT(t)

	must(t, s.PublishAddress(ctx, "n1", "127.0.0.1:7001", "127.0.0.1:8001"))
	time.Sleep(700 * time.Millisecond)
	must(t, s.PublishAddress(ctx, "n2", "127.0.0.1:7002", "127.0.0.1:8002"))
	must(t, s.PublishAddress(ctx, "n3", "[::1]:7003", "[::1]:8003"))

	got, err := s.DiscoverGossip(ctx, time.Minute)
	must(t, err)
	if want := []string{"[::1]:8003", "127.0.0.1:8002", "127.0.0.1:8001"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("DiscoverGossip(1m) = %v, want %v (newest first)", got, want)
	}
	got, err = s.DiscoverGossip(ctx, 500*time.Millisecond)
	must(t, err)
	if want := []string{"[::1]:8003", "127.0.0.1:8002"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("DiscoverGossip(500ms) = %v, want %v (n1 published 700ms earlier)", got, want)
	}

	// Publishing again refreshes the time and the addresses.
	must(t, s.PublishAddress(ctx, "n1", "127.0.0.1:7001", "127.0.0.1:9001"))
	got, err = s.DiscoverGossip(ctx, time.Minute)
	must(t, err)
	if len(got) != 3 || got[0] != "127.0.0.1:9001" {
		t.Fatalf("after republishing n1: %v, want 127.0.0.1:9001 first of 3", got)
	}

	must(t, s.ForgetAddress(ctx, "n2"))
	must(t, s.ForgetAddress(ctx, "never-published"))
	got, err = s.DiscoverGossip(ctx, time.Minute)
	must(t, err)
	if want := []string{"127.0.0.1:9001", "[::1]:8003"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after forgetting n2: %v, want %v", got, want)
	}

	// Two ids that share a gossip address (a node restarted under a new id)
	// give it once.
	must(t, s.PublishAddress(ctx, "n4", "127.0.0.1:7004", "[::1]:8003"))
	got, err = s.DiscoverGossip(ctx, time.Minute)
	must(t, err)
	if want := []string{"[::1]:8003", "127.0.0.1:9001"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("with a shared address: %v, want %v", got, want)
	}
}

func TestDiscovery_Invalid(t *testing.T) {
	s := newStore(t, "c1")
	ctx := ctxT(t)
	for name, err := range map[string]error{
		"empty id":        s.PublishAddress(ctx, "", "127.0.0.1:1", "127.0.0.1:2"),
		"bad raft addr":   s.PublishAddress(ctx, "n1", "127.0.0.1", "127.0.0.1:2"),
		"bad gossip addr": s.PublishAddress(ctx, "n1", "127.0.0.1:1", "127.0.0.1:0"),
		"forget bad id":   s.ForgetAddress(ctx, "a\nb"),
		"zero maxAge":     func() error { _, err := s.DiscoverGossip(ctx, 0); return err }(),
		"negative maxAge": func() error { _, err := s.DiscoverGossip(ctx, -time.Second); return err }(),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		wantErr(t, err, ErrInvalid)
	}
}
