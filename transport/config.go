package transport

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// Defaults for the zero values of Config.
const (
	DefaultDialTimeout      = 2 * time.Second
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultIdleTimeout      = 2 * time.Minute
	DefaultMaxConns         = 512
	DefaultMaxConnsPerPeer  = 64
)

// Config configures a Transport. New validates it; nothing in it can be
// changed afterwards.
type Config struct {
	// BindAddr is the TCP address (host:port) to listen on, for example
	// "127.0.0.1:7400". Port 0 picks a free port (tests). Required.
	BindAddr string
	// AdvertiseAddr is the address peers dial to reach this transport: an
	// IP:port whose IP is not unspecified (not 0.0.0.0 or ::) and whose port
	// is not 0. Default: the listener's actual address, which requires
	// BindAddr to name a specific IP.
	AdvertiseAddr string
	// Handler serves inbound RPCs. If nil, requests are answered with
	// ErrNotServing until Transport.Serve installs one: an owner whose
	// handler needs state built after the transport (raft runs over it)
	// installs the handler once that state exists.
	Handler Handler
	// MaxFrameSize bounds the length prefix of every RPC frame this
	// transport reads or writes (9 header bytes plus the payload). A
	// connection that declares a longer inbound frame is closed; a Call
	// whose request would not fit fails with ErrFrameTooLarge. Default
	// DefaultMaxFrameSize (1 MiB); allowed MinMaxFrameSize to MaxMaxFrameSize.
	MaxFrameSize int
	// DialTimeout bounds connecting to a peer (and writing the stream byte),
	// within the caller's context. Default DefaultDialTimeout (2s).
	DialTimeout time.Duration
	// HandshakeTimeout is how long an accepted connection has to send its
	// stream byte (with TLS: to complete the TLS handshake and send its
	// stream byte) before it is closed (slow loris), and how long a raft
	// stream waits for StreamLayer.Accept. Default DefaultHandshakeTimeout (5s).
	HandshakeTimeout time.Duration
	// IdleTimeout closes RPC connections with no call in flight: Call's
	// pooled connections after IdleTimeout, served ones after twice that
	// (so the dialing side, which knows whether it is about to send, closes
	// first). It also bounds how long a single frame write may stall.
	// Default DefaultIdleTimeout (2m).
	IdleTimeout time.Duration
	// MaxConns bounds the inbound connections open at once (raft and RPC,
	// including those still in the handshake). Connections beyond it are
	// closed as soon as they are accepted, logged and counted. Default
	// DefaultMaxConns (512).
	MaxConns int
	// MaxConnsPerPeer bounds the inbound connections open at once from one
	// remote IPv4 address or IPv6 /64, so one host flooding the port cannot take every
	// MaxConns slot from the rest of the cluster. Connections beyond it are
	// closed as soon as they are accepted, logged and counted. A peer needs
	// a few (raft's pool and raftpace's RPC pool). Default
	// DefaultMaxConnsPerPeer (64); at most MaxConns.
	MaxConnsPerPeer int
	// TLS, when set, runs every connection over mutual TLS 1.3 with the
	// cluster CA (see TLSConfig for the trust model). The TLS handshake comes
	// first and the stream byte inside it. Peers must agree: a TLS transport
	// refuses plaintext dialers and a transport without TLS refuses TLS
	// dialers, each with a log line naming the remote address. Default: nil
	// (plaintext).
	TLS *TLSConfig
	// Logger receives the transport's logs. Default: discard.
	Logger *slog.Logger
}

// withDefaults returns cfg with zero values replaced by defaults.
func (cfg Config) withDefaults() Config {
	if cfg.MaxFrameSize == 0 {
		cfg.MaxFrameSize = DefaultMaxFrameSize
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxConnsPerPeer == 0 {
		cfg.MaxConnsPerPeer = min(DefaultMaxConnsPerPeer, cfg.MaxConns)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// validate reports every problem with cfg (defaults already applied).
func (cfg Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("transport: config: "+format, args...))
	}
	bindUnspecified := false
	if cfg.BindAddr == "" {
		bad("BindAddr is required (host:port)")
	} else if host, port, err := net.SplitHostPort(cfg.BindAddr); err != nil {
		bad("BindAddr %q must be host:port: %w", cfg.BindAddr, err)
	} else {
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			bad("BindAddr %q: port %q must be a number from 0 to 65535", cfg.BindAddr, port)
		}
		if host == "" {
			bindUnspecified = true
		} else if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
			bindUnspecified = true
		}
	}
	if cfg.AdvertiseAddr != "" {
		if ap, err := netip.ParseAddrPort(cfg.AdvertiseAddr); err != nil {
			bad("AdvertiseAddr %q must be IP:port: %w", cfg.AdvertiseAddr, err)
		} else {
			if ap.Addr().IsUnspecified() {
				bad("AdvertiseAddr %q: IP must not be unspecified", cfg.AdvertiseAddr)
			}
			if ap.Port() == 0 {
				bad("AdvertiseAddr %q: port must not be 0", cfg.AdvertiseAddr)
			}
		}
	} else if bindUnspecified {
		bad("AdvertiseAddr is required when BindAddr %q does not name a specific IP", cfg.BindAddr)
	}
	if cfg.MaxFrameSize < MinMaxFrameSize || cfg.MaxFrameSize > MaxMaxFrameSize {
		bad("MaxFrameSize %d must be 0 (default %d) or from %d to %d", cfg.MaxFrameSize, DefaultMaxFrameSize, MinMaxFrameSize, MaxMaxFrameSize)
	}
	if cfg.DialTimeout < 0 {
		bad("DialTimeout %v must not be negative", cfg.DialTimeout)
	}
	if cfg.HandshakeTimeout < 0 {
		bad("HandshakeTimeout %v must not be negative", cfg.HandshakeTimeout)
	}
	if cfg.IdleTimeout < 0 {
		bad("IdleTimeout %v must not be negative", cfg.IdleTimeout)
	}
	if cfg.MaxConnsPerPeer < 0 || cfg.MaxConnsPerPeer > cfg.MaxConns {
		bad("MaxConnsPerPeer %d must be 0 (default) or 1..MaxConns (%d)", cfg.MaxConnsPerPeer, cfg.MaxConns)
	}
	if cfg.MaxConns < 0 {
		bad("MaxConns %d must not be negative", cfg.MaxConns)
	}
	if cfg.TLS != nil {
		if err := cfg.TLS.Check(); err != nil {
			bad("TLS.Cert: %w", err)
		}
	}
	return errors.Join(errs...)
}
