// Package agent is the runtime of `raftpace agent`: given a node
// configuration already checked and the settings its flags decided, Run
// starts the node, serves the admin API with the status page, metrics,
// health probes and the data plane on one HTTP address (the data plane
// alone on --socket), writes the ready file, runs the load
// generators the flags asked for, and on a signal (its context ending), a
// leave through the admin API or a failed HTTP server stops all of it in
// order: load first, then (if asked) leaving the cluster, HTTP, the node.
// It parses no flags, but its errors name the agent's flags (--http,
// --ready-file, --timeline ...), as they are what the operator typed.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/raftpace/raftpace/agent/admin"
	"github.com/raftpace/raftpace/agent/dataplane"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/atomicfile"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/loadgen"
	"github.com/raftpace/raftpace/node"
)

// Config is what Run runs.
type Config struct {
	// Node is the node's configuration, already validated; Run sets its
	// Logger to Logger.
	Node   node.Config
	Logger *slog.Logger
	// HTTPAddr is where the admin API, status page, metrics and probes
	// listen; "" serves none. HTTPFlag is the --http value as typed, for
	// messages. Without HTTPToken the bound address must be a loopback one.
	HTTPAddr, HTTPFlag string
	HTTPToken          string
	// SocketPath, if set, is the unix socket (--socket) serving the data
	// plane (agent/dataplane) without a token; created with SocketMode,
	// removed at a clean exit.
	SocketPath string
	// ReadyFile, if set, receives a ReadyInfo once the node runs and the
	// HTTP address listens; it is removed at start and at a clean exit.
	ReadyFile string
	// LeaveOnTerminate makes the node leave the cluster when ctx ends.
	LeaveOnTerminate bool
	// Load, LoadSpecs and LoadMode ("raft" or "solo") are the reservation
	// load; Gate the HTTP and slot load; Policy a policy file to register.
	Load      loadgen.Config
	LoadSpecs []loadgen.Spec
	LoadMode  string
	Gate      loadgen.GateConfig
	Policy    string
}

// ConfigError lists every problem of a configuration.
type ConfigError struct{ Problems []string }

func (e *ConfigError) Error() string {
	return "agent: invalid configuration:\n" + strings.Join(e.Problems, "\n")
}

// ReadyInfo is the ready file's document.
type ReadyInfo struct {
	NodeID     string `json:"node_id"`
	Addr       string `json:"addr"`
	GossipAddr string `json:"gossip_addr"`
	HTTPAddr   string `json:"http_addr"`
	Socket     string `json:"socket,omitempty"`
	PID        int    `json:"pid"`
}

// LeaveTimeout bounds the leave when ctx ends.
const LeaveTimeout = 10 * time.Second

// Run runs the agent until ctx ends or the node leaves through the admin
// API. A node.New failure that wraps node.ErrInvalidConfig is returned as
// it is; other errors say what failed.
func Run(ctx context.Context, cfg Config) error {
	logger := cfg.Logger
	ncfg := cfg.Node
	ncfg.Logger = logger
	log := logger.With("component", "agent", "node", ncfg.NodeID)

	if cfg.ReadyFile != "" {
		if err := os.Remove(cfg.ReadyFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("agent: --ready-file: %w", err)
		}
		// Fail now, not after the node has joined the cluster, when the
		// file could not be written. The node makes --data-dir and its
		// parents: a directory among them need not exist yet.
		if dir := filepath.Dir(cfg.ReadyFile); !within(dir, ncfg.DataDir) && !within(ncfg.DataDir, dir) {
			if err := checkWritableDir(dir); err != nil {
				return fmt.Errorf("agent: --ready-file: %w", err)
			}
		}
	}
	tl, err := cfg.Load.OpenTimeline(ncfg.NodeID)
	if err != nil {
		return fmt.Errorf("agent: --timeline: %w", err)
	}
	if tl != nil {
		defer tl.Close()
	}
	var ln net.Listener
	if cfg.HTTPAddr != "" {
		if ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return fmt.Errorf("agent: --http: %w", err)
		}
		defer ln.Close()
		// A host name passed validate: check the address it bound.
		if ta, ok := ln.Addr().(*net.TCPAddr); ok && cfg.HTTPToken == "" && !ta.IP.IsLoopback() {
			return &ConfigError{Problems: []string{fmt.Sprintf(
				"--http %q bound %s, a non-loopback address: it needs --http-token-file (or RAFTPACE_HTTP_TOKEN)", cfg.HTTPFlag, ta)}}
		}
	}
	var sockLn net.Listener
	if cfg.SocketPath != "" {
		if sockLn, err = listenSocket(cfg.SocketPath); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		defer os.Remove(cfg.SocketPath)
		defer sockLn.Close()
	}
	log.Info("security", "node_tls", ncfg.TLSCertFile != "", "gossip_encrypted", ncfg.GossipKeyFile != "",
		"admin_token", cfg.HTTPToken != "")

	n, err := node.New(ncfg)
	if err != nil {
		if errors.Is(err, node.ErrInvalidConfig) {
			return err
		}
		return fmt.Errorf("agent: starting node: %w", err)
	}
	defer n.Close()

	left := make(chan error, 1)
	srvErr := make(chan error, 1)
	var srv, sockSrv *http.Server
	httpAddr := ""
	dp := dataplane.NewHandler(n) // one for both: a slot taken on one is given back on the other
	newServer := func(h http.Handler) *http.Server {
		return &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second, // /v1/wait lifts it once it has read its body
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          slog.NewLogLogger(logger.With("component", "http", "node", ncfg.NodeID).Handler(), slog.LevelWarn),
		}
	}
	if ln != nil {
		httpAddr = ln.Addr().String()
		srv = newServer(newHTTPHandler(n, admin.NewHandler(&agentNode{Node: n, log: log, left: left}, admin.WithToken(cfg.HTTPToken)), dp, cfg.HTTPToken))
		go func() { srvErr <- srv.Serve(ln) }()
		log.Info("admin API listening", "http", httpAddr)
	}
	if sockLn != nil {
		sockSrv = newServer(dp)
		go func() { srvErr <- sockSrv.Serve(sockLn) }()
		log.Info("data plane listening", "socket", cfg.SocketPath)
	}

	if cfg.ReadyFile != "" {
		info := ReadyInfo{NodeID: ncfg.NodeID, Addr: n.Addr(), GossipAddr: n.GossipAddr(), HTTPAddr: httpAddr,
			Socket: cfg.SocketPath, PID: os.Getpid()}
		b, _ := json.MarshalIndent(info, "", "  ")
		if err := atomicfile.Write(cfg.ReadyFile, append(b, '\n'), 0o644); err != nil {
			shutdownHTTP(srv, log)
			shutdownHTTP(sockSrv, log)
			return fmt.Errorf("agent: --ready-file: %w", err)
		}
		defer os.Remove(cfg.ReadyFile)
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	if cfg.Policy != "" {
		go func() {
			if err := registerPolicy(loadCtx, n, cfg.Policy, log); err != nil && loadCtx.Err() == nil {
				log.Error("registering the policy file failed", "file", cfg.Policy, "err", err)
			}
		}()
	}
	var gateWait func() error
	if cfg.Gate.Active() {
		if gateWait, err = loadgen.StartGate(loadCtx, n, cfg.Gate, log); err != nil {
			shutdownHTTP(srv, log)
			shutdownHTTP(sockSrv, log)
			return fmt.Errorf("agent: --slot-log: %w", err)
		}
	}
	var load *loadgen.Run
	if len(cfg.LoadSpecs) > 0 {
		var rec loadgen.Recorder = loadgen.CountOnly{}
		if tl != nil {
			rec = tl
		}
		opts := cfg.Load.Options(ncfg.UseGrace, ncfg.NodeID, log)
		load = loadgen.Start(loadCtx, loadgen.NodeTarget(n, cfg.LoadMode, ncfg.UseGrace), cfg.LoadSpecs, opts, rec, log.With("load_mode", cfg.LoadMode))
	}

	var result error
	leave := false
	select {
	case <-ctx.Done():
		if cfg.LeaveOnTerminate {
			log.Info("signal received; leaving the cluster, then shutting down")
			leave = true
		} else {
			log.Info("signal received; shutting down without leaving the cluster (--leave-on-terminate=false)")
		}
	case err := <-left:
		if err != nil {
			log.Error("leave failed; shutting down without having left", "err", err)
			result = fmt.Errorf("agent: leave: %w", err)
		} else {
			log.Info("left the cluster; shutting down")
		}
	case err := <-srvErr:
		log.Error("an HTTP server failed", "err", err)
		result = fmt.Errorf("agent: admin API or data plane: %w", err)
	}
	stopLoad()
	if leave {
		// Leave stops admitting first; the load sees ErrClosed and ends.
		// Bounded well inside the usual grace before SIGKILL (Kubernetes:
		// 30 s; systemd: 90 s).
		lctx, cancel := context.WithTimeout(context.Background(), LeaveTimeout)
		err := n.Leave(lctx)
		cancel()
		switch {
		case errors.Is(err, node.ErrLastVoter):
			log.Info("the cluster's last voter: stopping without leaving (its raft state stays in the data dir)")
		case err != nil:
			log.Error("could not leave the cluster; stopping without having left (the leader removes this member once it stops answering)", "err", err)
		}
	}
	if gateWait != nil {
		if err := gateWait(); err != nil {
			result = errors.Join(result, fmt.Errorf("agent: --slot-log: %w", err))
		}
	}
	if load != nil {
		load.Wait()
		if err := cfg.Load.WriteReport(load, ncfg.NodeID); err != nil {
			log.Error("writing the load report", "err", err)
			result = errors.Join(result, fmt.Errorf("agent: --load-report: %w", err))
		}
	}
	if tl != nil {
		if err := tl.Close(); err != nil {
			log.Error("closing timeline", "err", err)
			result = errors.Join(result, err)
		}
	}
	shutdownHTTP(srv, log)
	shutdownHTTP(sockSrv, log)
	if err := n.Close(); err != nil {
		log.Error("closing node", "err", err)
		result = errors.Join(result, err)
	}
	log.Info("stopped")
	return result
}

func shutdownHTTP(srv *http.Server, log *slog.Logger) {
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("admin API shutdown", "err", err)
		srv.Close()
	}
}

// within reports whether path is dir or lies inside it (lexically).
func within(path, dir string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// checkWritableDir checks that a file can be created in dir, as the ready
// file will be.
func checkWritableDir(dir string) error {
	f, err := os.CreateTemp(dir, ".raftpace-probe*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the probe's random name says nothing
		}
		return fmt.Errorf("cannot create a file in %s: %w", dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// agentNode is the node as the admin API sees it: when the node has left
// (and so closed), the agent is told, and exits.
type agentNode struct {
	*node.Node
	log  *slog.Logger
	left chan error
}

func (a *agentNode) Leave(ctx context.Context) error {
	a.log.Info("leaving the cluster (admin request)")
	err := a.Node.Leave(ctx)
	if err != nil {
		// Leave fails before it closes the node, except when closing
		// itself fails: then the agent has nothing left to run.
		if st, serr := a.Node.Status(context.Background()); serr == nil && st.State != "Shutdown" {
			a.log.Error("leave failed; still a member and running", "err", err)
			return err
		}
	}
	select {
	case a.left <- err:
	default:
	}
	return err
}
