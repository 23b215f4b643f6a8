// Command gubernator-bench runs one gubernator v2 instance for raftpace's
// side-by-side bench (raftpace bench): static peers on loopback, no
// discovery service, the default behaviour settings (GLOBAL hits are
// synced to the key's owner every 100ms). It is its own module so that
// raftpace's go.mod does not take gubernator's dependency tree; raftpace
// bench builds it with `go build` at bench time.
//
//	gubernator-bench --grpc 127.0.0.1:9001 --http 127.0.0.1:9081 \
//	    --peers 127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003
//
// It serves until SIGINT or SIGTERM. Once it listens it prints "ready" on
// stdout.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/gubernator-io/gubernator/v2"
	"github.com/sirupsen/logrus"
)

func main() {
	grpcAddr := flag.String("grpc", "127.0.0.1:9001", "gRPC listen address (peers talk gRPC)")
	httpAddr := flag.String("http", "127.0.0.1:9081", "HTTP listen address (the JSON API the bench calls)")
	peers := flag.String("peers", "", "comma-separated gRPC addresses of every instance, this one included")
	flag.Parse()

	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	d, err := gubernator.SpawnDaemon(ctx, gubernator.DaemonConfig{
		GRPCListenAddress: *grpcAddr,
		HTTPListenAddress: *httpAddr,
		AdvertiseAddress:  *grpcAddr,
		PeerDiscoveryType: "none",
		Logger:            logrus.NewEntry(log),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gubernator-bench:", err)
		os.Exit(1)
	}
	var infos []gubernator.PeerInfo
	for _, p := range strings.Split(*peers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			infos = append(infos, gubernator.PeerInfo{GRPCAddress: p, IsOwner: p == *grpcAddr})
		}
	}
	if len(infos) == 0 {
		infos = []gubernator.PeerInfo{{GRPCAddress: *grpcAddr, IsOwner: true}}
	}
	d.SetPeers(infos)
	fmt.Println("ready")
	<-ctx.Done()
	d.Close()
}
