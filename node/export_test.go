package node

// UnsafeFreshStart makes a node, when it becomes leader, start every key at
// now instead of at the inherited horizon: the protection turned off, so
// tests can show that their ceiling checks fail without it.
func UnsafeFreshStart(c *Config) { c.unsafeFreshStart = true }
