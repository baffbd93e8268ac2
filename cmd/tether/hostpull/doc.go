// Package hostpull brings a workspace's changes into the host directory it was made from: a
// three-way plan per changed path (the base the workspace received, the workspace now, the host
// now) and its application through a guard on the host, so that the host side of a pull keeps
// the same promises as the sandbox side: no symlink followed, no path outside the directory,
// each file published whole, nothing written when the plan is refused.
//
// Only the paths the workspace changed are looked at on the host: an unchanged workspace reads
// nothing there, and a host edit elsewhere is never touched.
package hostpull
