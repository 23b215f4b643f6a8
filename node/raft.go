package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/raftpace/raftpace"
	"github.com/raftpace/raftpace/fsm"
	"github.com/raftpace/raftpace/internal/logging"
	"github.com/raftpace/raftpace/internal/loop"
	"github.com/raftpace/raftpace/node/wire"
)

// storeOpenTimeout bounds the wait for the raft store's file lock: another
// process (or node) running on the same DataDir holds it for as long as it
// runs, so waiting longer would only hang the start.
const storeOpenTimeout = time.Second

func (n *Node) startRaft() error {
	cfg := n.cfg
	hlog := logging.HCLog(n.log, "raft")
	path := filepath.Join(cfg.DataDir, "raft.db")
	store, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{Timeout: storeOpenTimeout}})
	if errors.Is(err, bbolt.ErrTimeout) {
		return fmt.Errorf("node: raft store %s: locked by another process for %v (is another node running on DataDir %q?): %w", path, storeOpenTimeout, cfg.DataDir, err)
	}
	if err != nil {
		return fmt.Errorf("node: raft store: %w", err)
	}
	n.store = store
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, hlog)
	if err != nil {
		return fmt.Errorf("node: snapshot store: %w", err)
	}
	n.raftTrans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  n.trans.StreamLayer(),
		MaxPool: 3,
		Timeout: 5 * time.Second,
		Logger:  hlog,
	})
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.HeartbeatTimeout = cfg.Timing.HeartbeatTimeout
	rc.ElectionTimeout = cfg.Timing.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.Timing.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.Timing.CommitTimeout
	// Horizon entries arrive a few times a second; snapshot often enough
	// that a restart replays little.
	rc.SnapshotThreshold = 2048
	rc.TrailingLogs = 1024
	rc.Logger = hlog
	notify := make(chan bool, 16)
	rc.NotifyCh = notify
	if err := raft.ValidateConfig(rc); err != nil {
		return fmt.Errorf("node: %w: raft: %w", ErrInvalidConfig, err)
	}
	logs, err := raft.NewLogCache(512, store)
	if err != nil {
		return fmt.Errorf("node: log cache: %w", err)
	}
	hasState, err := raft.HasExistingState(logs, store, snaps)
	if err != nil {
		return fmt.Errorf("node: raft state: %w", err)
	}
	n.freshStart = !hasState
	r, err := raft.NewRaft(rc, n.fsm, logs, store, snaps, n.raftTrans)
	if err != nil {
		return fmt.Errorf("node: raft: %w", err)
	}
	n.raft = r
	n.wg.Add(1)
	go n.leadershipLoop(notify)
	if !hasState && cfg.BootstrapExpect == 1 {
		boot := raft.Configuration{Servers: []raft.Server{{
			Suffrage: raft.Voter, ID: raft.ServerID(cfg.NodeID), Address: raft.ServerAddress(n.Addr()),
		}}}
		if err := r.BootstrapCluster(boot).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("node: bootstrap: %w", err)
		}
	}
	return nil
}

// leadershipLoop follows raft's leadership notifications. On gaining
// leadership the pacer waits for raft's barrier (every earlier entry
// applied, so every inherited horizon is known) before it grants.
func (n *Node) leadershipLoop(notify <-chan bool) {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case leader := <-notify:
			n.leaderTransitions.Add(1)
			gen := n.pacer.StepDown()
			n.shares.StepDown()
			if !leader {
				n.log.Info("lost leadership")
				continue
			}
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				n.becomeLeader(gen)
			}()
		}
	}
}

// becomeLeader starts granting as leader for pacer generation gen: after
// raft's barrier (every earlier entry applied, so every inherited horizon
// is known), the restore of a fresh cluster, and one round of share
// renewals (a new leader holds nothing until members answer).
func (n *Node) becomeLeader(gen uint64) {
	if err := n.raft.Barrier(10 * time.Second).Error(); err != nil {
		n.log.Warn("barrier after election failed; not granting", "err", err)
		return
	}
	if !n.restoreBeforeLeading(gen) {
		return
	}
	n.shares.Lead(n.state.Members())
	n.renewShares()
	if n.pacer.Lead(gen) {
		n.log.Info("leading: granting from inherited horizons", "term", n.raft.CurrentTerm())
	}
}

// extendLoop commits horizon extensions while this node leads. It and
// handOver are the only writers of horizon entries, serialised by
// horizonWrites, so entries never race each other.
func (n *Node) extendLoop() {
	defer n.wg.Done()
	loop.Every(n.ctx, n.pacer.ExtendEvery(), n.pacer.Kicks(), func() bool {
		for n.extendOnce() {
		}
		return true
	})
}

// extendOnce collects and commits one extension, under horizonWrites;
// false when there is none or it failed.
func (n *Node) extendOnce() bool {
	n.horizonWrites.Lock()
	defer n.horizonWrites.Unlock()
	ext, ok := n.pacer.Collect()
	if !ok {
		return false
	}
	for _, c := range ext.Commands() {
		if _, err := n.commit(c, commitTimeout); err != nil {
			n.stats.extendErrors.Add(1)
			n.log.Warn("horizon extension not committed", "keys", len(ext.Cmd.Entries), "quotas", len(ext.Quotas.Entries), "err", err)
			return false
		}
	}
	n.stats.extensions.Add(1)
	n.pacer.Committed(ext)
	return true
}

// commit encodes c, commits it through raft on this node (the leader) and
// returns its log index. Not leading: ErrNotLeader. Raft failing to commit
// (a timeout, a shutdown): wire.ErrRetry. The state refusing the command:
// ErrInvalidRequest. The one place raft's errors are translated.
func (n *Node) commit(c fsm.Command, timeout time.Duration) (uint64, error) {
	data, err := fsm.Encode(c)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", raftpace.ErrInvalidRequest, err)
	}
	begin := time.Now()
	f := n.raft.Apply(data, timeout)
	err = f.Error()
	n.applyHist.Observe(time.Since(begin))
	if err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return 0, wire.ErrNotLeader
		}
		return 0, fmt.Errorf("%w: raft apply: %w", wire.ErrRetry, err)
	}
	if err, ok := f.Response().(error); ok && err != nil {
		return 0, fmt.Errorf("%w: %w", raftpace.ErrInvalidRequest, err)
	}
	return f.Index(), nil
}

// waitApplied returns once this node's state has applied index.
func (n *Node) waitApplied(ctx context.Context, index uint64) error {
	for {
		ch := n.fsm.Applied()
		if n.state.AppliedIndex() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("node: waiting for index %d: %w", index, ctx.Err())
		case <-n.ctx.Done():
			return raftpace.ErrClosed
		}
	}
}
