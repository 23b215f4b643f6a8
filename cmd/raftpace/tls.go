package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/raftpace/raftpace/cmd/raftpace/internal/certs"
	"github.com/raftpace/raftpace/cmd/raftpace/internal/cmdline"
)

// tlsNameRE is what tls node accepts as NAME: it becomes a file name.
var tlsNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func (c *cli) tls(name string, args []string) error {
	// The subcommand is the first argument that is not a flag or a flag's
	// value (only --dir takes one).
	sub := -1
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			sub = i
			break
		}
		n, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case n == "h" || n == "help":
			fmt.Fprint(c.stdout, certs.Usage)
			return cmdline.ErrHelp
		case n == "dir" && !hasValue:
			i++
		}
	}
	if sub < 0 || args[sub] == "--" {
		return &cmdline.UsageError{Cmd: "tls", Msg: "missing subcommand: init or node", Usage: certs.Usage}
	}
	rest := append(slices.Clone(args[:sub]), args[sub+1:]...)
	switch args[sub] {
	case "init":
		return c.tlsInit(rest)
	case "node":
		return c.tlsNode(rest)
	case "help":
		fmt.Fprint(c.stdout, certs.Usage)
		return cmdline.ErrHelp
	}
	return &cmdline.UsageError{Cmd: "tls", Msg: fmt.Sprintf("unknown subcommand %q: want init or node", args[sub]), Usage: certs.Usage}
}

func tlsFlags(cmd, synopsis, about string) (*cmdline.Flags, *string, *bool) {
	f := cmdline.New(cmd, synopsis, about)
	dir := f.String("dir", ".", "`DIR` holding the CA files and where the new files go")
	force := f.Bool("force", false, "overwrite existing files")
	return f, dir, force
}

func (c *cli) tlsInit(args []string) error {
	f, dir, force := tlsFlags("tls init", "[--dir DIR] [--force]",
		"Writes a new cluster CA (ca.pem, ca-key.pem) and gossip key (gossip.key) in DIR.\nRun 'raftpace tls -h' for the whole story.")
	pos, err := c.parse(f, args)
	if err != nil {
		return err
	}
	if err := f.NoArgs(pos); err != nil {
		return err
	}
	ca, err := certs.NewCA()
	if err != nil {
		return fmt.Errorf("tls init: %w", err)
	}
	gossip, err := certs.NewGossipKey()
	if err != nil {
		return fmt.Errorf("tls init: %w", err)
	}
	files := []certs.File{
		{Name: "ca.pem", Data: ca.CertPEM, Mode: 0o644},
		{Name: "ca-key.pem", Data: ca.KeyPEM, Mode: 0o600},
		{Name: "gossip.key", Data: []byte(gossip + "\n"), Mode: 0o600},
	}
	if err := certs.WriteFiles(*dir, files, *force); err != nil {
		return fmt.Errorf("tls init: %w", err)
	}
	fmt.Fprintf(c.stdout, "wrote %s (the cluster CA %q: every node's --tls-ca)\n", filepath.Join(*dir, "ca.pem"), ca.Name())
	fmt.Fprintf(c.stdout, "wrote %s (the CA's private key: keep it offline; only 'tls node' needs it)\n", filepath.Join(*dir, "ca-key.pem"))
	fmt.Fprintf(c.stdout, "wrote %s (every node's --gossip-key-file)\n", filepath.Join(*dir, "gossip.key"))
	fmt.Fprintf(c.stdout, "next: raftpace tls node NAME --dir %s, once per node\n", *dir)
	return nil
}

func (c *cli) tlsNode(args []string) error {
	f, dir, force := tlsFlags("tls node", "NAME [--dir DIR] [--force]",
		"Writes NAME.pem and NAME-key.pem in DIR: a node certificate signed by the CA\nin DIR (ca.pem, ca-key.pem). Run 'raftpace tls -h' for the whole story.")
	pos, err := c.parse(f, args)
	if err != nil {
		return err
	}
	name, err := f.One(pos, "NAME")
	if err != nil {
		return err
	}
	if !tlsNameRE.MatchString(name) || name == "ca" || name == "ca-key" || name == "gossip" {
		return f.ValueError("NAME %q: must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit, and not ca, ca-key or gossip", name)
	}
	ca, err := certs.LoadCA(*dir)
	if err != nil {
		return fmt.Errorf("tls node: %w", err)
	}
	certPEM, keyPEM, err := ca.Issue(name)
	if err != nil {
		return fmt.Errorf("tls node: %w", err)
	}
	files := []certs.File{
		{Name: name + ".pem", Data: certPEM, Mode: 0o644},
		{Name: name + "-key.pem", Data: keyPEM, Mode: 0o600},
	}
	if err := certs.WriteFiles(*dir, files, *force); err != nil {
		return fmt.Errorf("tls node: %w", err)
	}
	cert, key := filepath.Join(*dir, name+".pem"), filepath.Join(*dir, name+"-key.pem")
	fmt.Fprintf(c.stdout, "wrote %s and %s (CN=%s, valid until %s)\n", cert, key, name, time.Now().Add(certs.NodeValidity).Format("2006-01-02"))
	fmt.Fprintf(c.stdout, "agent flags: --tls-ca %s --tls-cert %s --tls-key %s --gossip-key-file %s\n",
		filepath.Join(*dir, "ca.pem"), cert, key, filepath.Join(*dir, "gossip.key"))
	return nil
}
