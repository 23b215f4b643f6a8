// Package datadir keeps a node's data dir to the node it belongs to. A
// data dir holds one node's raft log and state; the same dir started under
// another --node-id (a volume mounted on the wrong pod, a copied dir, a
// mistyped id) came up as a node raft did not know, which waited for ever
// for a leader it could not have, while the node whose state it held was
// gone from the cluster's point of view. Claim refuses that at start-up,
// naming both ids.
//
// It depends on the standard library only.
package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// File is the name, inside a data dir, of the file naming its node.
const File = "node-id"

// ErrOtherNode: the data dir belongs to another node id.
var ErrOtherNode = errors.New("a data dir of another node")

// Claim makes dir (created if missing) belong to id: it writes File the
// first time, and later refuses (ErrOtherNode) when File names another
// id. A dir from a build before this file (raft state, no File) is claimed
// by the id it is started with.
func Claim(dir, id string) error {
	path := filepath.Join(dir, File)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if owner := strings.TrimSpace(string(b)); owner != id {
			return fmt.Errorf("%w: %s holds node %q's raft state, and this node is %q: start %q with its own data dir (an empty one joins as a new member), or start it as %q", ErrOtherNode, dir, owner, id, id, owner)
		}
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o640); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
