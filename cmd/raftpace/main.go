// Command raftpace is raftpace's one binary: the daemon that runs a node and
// the operator's tool that talks to it.
//
// Daemon:
//
//	raftpace agent --data-dir DIR [flags]   run a node; serves the admin API
//	                                        on --http (default 127.0.0.1:7402)
//	raftpace demo [flags]                   a 3-node cluster in this process,
//	                                        holding one limit under load
//
// Operator (each talks to an agent's admin API at --addr, default
// 127.0.0.1:7402, or RAFTPACE_ADDR):
//
//	raftpace status [--json]
//	raftpace limit set KEY --rate R [--burst B]
//	raftpace limit get KEY
//	raftpace limit list
//	raftpace join ADDR[,ADDR...]            gossip addresses of cluster members
//	raftpace leave                          the agent leaves the cluster and exits
//
// Tools:
//
//	raftpace check --rate R [--burst B] FILE...   check timelines against R*W+B
//	raftpace version
//	raftpace help [COMMAND]
//
// Every agent flag has a RAFTPACE_* environment equivalent (--data-dir and
// RAFTPACE_DATA_DIR); a flag on the command line wins. Flags may follow
// positional arguments (raftpace limit set KEY --rate 5); a KEY that
// starts with '-' goes last, after every flag and a -- (raftpace limit set
// --rate 5 -- -key).
//
// Exit status: 0 on success; 1 when the agent refused or the command failed
// (or check or demo found a window over the ceiling); 2 on a usage error,
// including values the cluster would refuse and an agent's invalid
// configuration; 3 when no agent answered at --addr.
//
// The agent's --load flag turns it into a load generator for tests and
// demos: goroutines call client.Wait in a loop and append every admitted
// event to a --timeline file, which check verifies. --load-mode solo turns
// coordination off (each process paces alone at the full rate) to show that
// such a test can fail.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }() // a second signal kills at once
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
