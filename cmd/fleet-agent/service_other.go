//go:build !windows

package main

// runAsService: only Windows has a service control manager to talk to.
func runAsService([]string) bool { return false }
