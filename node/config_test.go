package node_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/raftpace/raftpace/node"
)

func TestDefaultConfig(t *testing.T) {
	d := node.DefaultConfig()
	if d.ClusterName != "raftpace" || d.Voters != 3 || d.Timing != node.LANTiming() ||
		d.HorizonAhead != time.Second || d.UseGrace != 50*time.Millisecond || d.LeaseSpan != 20*time.Millisecond ||
		d.ShareTTL != 2*time.Second || d.FallbackFor != time.Minute || d.ReapMargin != 10*time.Second ||
		d.MaxSlotTTL != 30*time.Second || d.FailedServerAfter != d.ShareTTL+time.Second ||
		d.WitnessTTL != 3*time.Second || d.CheckpointEvery != 5*time.Second || d.Logger == nil {
		t.Errorf("DefaultConfig() = %+v", d)
	}
	// The fields without a default are what Validate asks for.
	err := d.Validate()
	if !errors.Is(err, node.ErrInvalidConfig) {
		t.Fatalf("Validate of DefaultConfig: %v, want ErrInvalidConfig", err)
	}
	for _, want := range []string{"NodeID", "DataDir", "BindAddr", "GossipBindAddr"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate does not name %s:\n%v", want, err)
		}
	}
	d.NodeID, d.DataDir = "n1", t.TempDir()
	d.BindAddr, d.GossipBindAddr = "127.0.0.1:0", "127.0.0.1:0"
	if err := d.Validate(); err != nil {
		t.Errorf("Validate of a filled DefaultConfig: %v", err)
	}
}

func TestConfig_Validate(t *testing.T) {
	ok := node.DefaultConfig()
	ok.NodeID, ok.DataDir, ok.BindAddr, ok.GossipBindAddr = "n1", t.TempDir(), "127.0.0.1:0", "127.0.0.1:0"
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	// Validate checks the Config as given: a zero field is not its default.
	zero := ok
	zero.Voters = 0
	if err := zero.Validate(); err == nil || !strings.Contains(err.Error(), `Voters "0": must be 1-5`) {
		t.Errorf("Validate with Voters 0: %v", err)
	}
	bad := ok
	bad.Voters, bad.ShareTTL, bad.FailedServerAfter = 6, time.Second, time.Hour+1
	err := bad.Validate()
	if !errors.Is(err, node.ErrInvalidConfig) {
		t.Fatalf("got %v, want ErrInvalidConfig", err)
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{`invalid config: Voters "6": must be 1-5`, `invalid config: FailedServerAfter "1h0m0.000000001s": must be ShareTTL/2..1h`}
	if len(lines) != len(want) {
		t.Fatalf("Validate:\n%v\nwant %d problems", err, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("problem %d: %q, want %q...", i, lines[i], w)
		}
	}
}
