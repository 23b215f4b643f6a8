// Package raftpace holds what every side of raftpace speaks: the grants a
// caller gets back (Reservation, Slot) and the errors a request can end in.
// It is a leaf: it imports nothing of the project, so the embedded node,
// the client and the agent's adapters share these names without importing
// each other.
//
// The library itself is package node (a member of the cluster, embedded in
// a worker) and package client (the API a worker calls); see the README.
package raftpace
