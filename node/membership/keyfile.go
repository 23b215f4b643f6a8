package membership

import (
	"encoding/base64"
	"fmt"
	"os"
	"strings"
)

// ReadKeyFile reads the gossip encryption key (memberlist's SecretKey)
// from path: the base64 of 16, 24 or 32 bytes, as `raftpace tls init`
// writes it. An empty path is no key (nil, nil). Errors name the field
// GossipKeyFile and the path.
func ReadKeyFile(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("GossipKeyFile: %w", err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("GossipKeyFile %q: must hold the base64 of 16, 24 or 32 random bytes: %w", path, err)
	}
	if n := len(key); n != 16 && n != 24 && n != 32 {
		return nil, fmt.Errorf("GossipKeyFile %q: the key is %d bytes; it must be 16, 24 or 32 (raftpace tls init writes 32)", path, n)
	}
	return key, nil
}
