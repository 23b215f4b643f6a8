package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// SocketMode is the data-plane socket's mode: the agent's user and group
// may connect (the file mode is the socket's only access control).
const SocketMode = 0o660

// maxSocketPath is the longest unix socket path every platform takes
// (sun_path is 104 bytes on the BSDs and macOS, 108 on Linux, with its NUL).
const maxSocketPath = 103

// CheckSocket checks --socket's path before the node starts: its directory
// exists, and nothing is at the path but, at most, a stale socket (one no
// process answers on), which the agent replaces. Its errors name the flag
// and the path.
func CheckSocket(path string) error {
	if len(path) > maxSocketPath {
		return fmt.Errorf("--socket %q: longer than %d bytes, the most a unix socket path may be", path, maxSocketPath)
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil {
		return fmt.Errorf("--socket %q: its directory: %w", path, err)
	} else if !st.IsDir() {
		return fmt.Errorf("--socket %q: %s is not a directory", path, dir)
	}
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("--socket %q: %w", path, err)
	case st.IsDir():
		return fmt.Errorf("--socket %q: is a directory, not a socket", path)
	case st.Mode()&fs.ModeSocket == 0:
		return fmt.Errorf("--socket %q: a file that is not a socket is there (%v); remove it or choose another path", path, st.Mode().Type())
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("--socket %q: another process (an agent still running?) answers on this socket", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("--socket %q: cannot tell whether another process answers on it: %w", path, err)
	}
	return nil
}

// listenSocket checks path again (an agent may have started meanwhile),
// removes a stale socket, listens on it and sets its mode whatever the
// umask was.
func listenSocket(path string) (net.Listener, error) {
	if err := CheckSocket(path); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("--socket %q: removing the stale socket: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("--socket %q: %w", path, err)
	}
	if err := os.Chmod(path, SocketMode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("--socket %q: %w", path, err)
	}
	return ln, nil
}
