//go:build !linux

package main

import "os/exec"

// setParentDeathSignal does nothing off Linux; the signal handler and the
// deferred stop kill the server instead.
func setParentDeathSignal(*exec.Cmd) {}
