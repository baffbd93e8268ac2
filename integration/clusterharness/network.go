package clusterharness

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A Network is a Linux bridge on the host with one network namespace per node (a controller),
// each joined to the bridge by a veth pair, on a private /24 of 10.213.0.0/16 that no interface
// of the machine uses. The host side of the bridge has .1: the test process, HAProxy and the
// relays to PostgreSQL and MinIO listen there, so everything a node reaches is the test's own.
// Nodes have no default route: their traffic cannot leave the bridge.
type Network struct {
	ID     string // random, names every link and namespace of this network
	Bridge string
	Subnet netip.Prefix
	HostIP netip.Addr // the bridge's address

	mu    sync.Mutex
	nodes []*Node
	state netState
}

// A Node is one network namespace on the bridge.
type Node struct {
	Name   string     // the namespace: `ip netns exec NAME …`
	IP     netip.Addr // its address on the bridge
	HostIf string     // the host end of its veth, on the bridge: down cuts the node off
	nodeIf string     // the end inside the namespace
}

// stateDir holds what the networks of running tests are made of, shared by every test process
// on the machine (/run is per boot, like the links): the lock that makes choosing a subnet and
// claiming it one step, and one state file per network, so a network whose test was killed
// before its cleanup ran is torn down by the next test that makes one.
const stateDir = "/run/tether-itest"

// netState is a network's state file: its owner and what to tear down.
type netState struct {
	PID      int      `json:"pid"`
	Start    string   `json:"start"` // the owner's start time, telling it from a later pid
	Bridge   string   `json:"bridge"`
	Netns    []string `json:"netns"`
	Iptables bool     `json:"iptables"` // a FORWARD rule was added for the bridge
}

// subnetBase is where the /24s are taken from: the third octet is chosen per network.
var subnetBase = [2]byte{10, 213}

// NewNetwork makes the bridge, on a subnet no interface or route of the machine overlaps,
// and tears everything of the network down when t ends.
func NewNetwork(t testing.TB) *Network {
	t.Helper()
	requireNetworking(t)
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(stateDir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	sweepStaleNetworks(t)

	n := &Network{ID: fmt.Sprintf("%06x", rand.Uint32()&0xffffff)}
	n.Bridge = "tbr" + n.ID
	n.Subnet, err = freeSubnet()
	if err != nil {
		t.Fatal(err)
	}
	n.HostIP = n.Subnet.Addr().Next()
	n.state = netState{PID: os.Getpid(), Start: startTime(os.Getpid()), Bridge: n.Bridge}
	// Written before anything exists: a test killed half-way still leaves the file to sweep.
	n.saveState(t)
	t.Cleanup(func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if err := teardown(n.state); err != nil {
			t.Errorf("network %s: %v", n.ID, err)
			return
		}
		_ = os.Remove(n.statePath())
	})
	mustRun(t, "ip", "link", "add", n.Bridge, "type", "bridge")
	mustRun(t, "ip", "addr", "add", n.HostIP.String()+"/24", "dev", n.Bridge)
	mustRun(t, "ip", "link", "set", n.Bridge, "up")
	// With br_netfilter loaded, frames between two ports of a bridge pass the host's FORWARD
	// chain, whose policy is DROP wherever dockerd manages iptables: without this rule (the
	// one dockerd adds for its own bridges) nodes would reach the host but not each other.
	if _, err := exec.LookPath("iptables"); err == nil {
		n.state.Iptables = true
		n.saveState(t)
		mustRun(t, iptablesForward("-I", n.Bridge)...)
	}
	return n
}

// AddNode makes a network namespace joined to the bridge, with the next address of the
// subnet and its loopback up.
func (n *Network) AddNode(t testing.TB, name string) *Node {
	t.Helper()
	n.mu.Lock()
	i := len(n.nodes)
	if i >= 250 { // .1 is the bridge's, nodes start at .2, .255 is the broadcast
		n.mu.Unlock()
		t.Fatal("a network holds at most 250 nodes")
	}
	node := &Node{
		Name:   fmt.Sprintf("tether-%s-%s", n.ID, name),
		IP:     n.Subnet.Addr(),
		HostIf: fmt.Sprintf("tvh%s%d", n.ID, i),
		nodeIf: fmt.Sprintf("tvn%s%d", n.ID, i),
	}
	for range i + 2 {
		node.IP = node.IP.Next()
	}
	n.nodes = append(n.nodes, node)
	n.state.Netns = append(n.state.Netns, node.Name)
	n.mu.Unlock()
	n.saveState(t)
	mustRun(t, "ip", "netns", "add", node.Name)
	mustRun(t, "ip", "link", "add", node.HostIf, "type", "veth", "peer", "name", node.nodeIf, "netns", node.Name)
	mustRun(t, "ip", "link", "set", node.HostIf, "master", n.Bridge, "up")
	mustRun(t, "ip", "-n", node.Name, "addr", "add", node.IP.String()+"/24", "dev", node.nodeIf)
	mustRun(t, "ip", "-n", node.Name, "link", "set", node.nodeIf, "up")
	mustRun(t, "ip", "-n", node.Name, "link", "set", "lo", "up")
	return node
}

// Command is a command that runs inside the node's namespace. `ip netns exec` execs it in
// place, so the process's pid is the command's own and signals reach it.
func (nd *Node) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", nd.Name, name}, args...)...)
}

// Cut takes the host end of the node's veth down: the node is cut off from the host, the
// balancer and every other node; its processes keep running and its sockets stay open
// (nothing answers them), as in a partition.
func (n *Network) Cut(t testing.TB, nd *Node) {
	t.Helper()
	mustRun(t, "ip", "link", "set", nd.HostIf, "down")
}

// Restore brings the node's link back up.
func (n *Network) Restore(t testing.TB, nd *Node) {
	t.Helper()
	mustRun(t, "ip", "link", "set", nd.HostIf, "up")
}

func (n *Network) statePath() string { return filepath.Join(stateDir, n.ID+".json") }

// saveState replaces the network's state file (callers hold no lock on n.mu).
func (n *Network) saveState(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	b, err := json.Marshal(n.state)
	n.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	tmp := n.statePath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, n.statePath()); err != nil {
		t.Fatal(err)
	}
}

// teardown kills every process in the network's namespaces (controllers, their plugins and
// runners, and what the runners started: a namespace lives on while a process is in it), then
// deletes the namespaces (their veth pairs go with them), the bridge and the FORWARD rule.
func teardown(s netState) error {
	var errs []string
	for _, ns := range s.Netns {
		if !netnsExists(ns) {
			continue
		}
		if err := killNetns(ns); err != nil {
			errs = append(errs, err.Error())
		}
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Sprintf("ip netns del %s: %v: %s", ns, err, out))
		}
	}
	if linkExists(s.Bridge) {
		if out, err := exec.Command("ip", "link", "del", s.Bridge).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Sprintf("ip link del %s: %v: %s", s.Bridge, err, out))
		}
	}
	if s.Iptables {
		// The state says so just before the rule is added: a test killed in between has none,
		// and deleting a missing rule fails, harmlessly.
		del := iptablesForward("-D", s.Bridge)
		_ = exec.Command(del[0], del[1:]...).Run()
	}
	if len(errs) > 0 {
		return fmt.Errorf("teardown: %s", strings.Join(errs, "; "))
	}
	return nil
}

func iptablesForward(op, bridge string) []string {
	return []string{"iptables", "-w", op, "FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT"}
}

// killNetns SIGKILLs every process in the namespace until none is left (a process may be
// forking while the first ones die).
func killNetns(ns string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command("ip", "netns", "pids", ns).Output()
		if err != nil {
			return fmt.Errorf("ip netns pids %s: %v", ns, err)
		}
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v in %s outlived SIGKILL for 30s", pids, ns)
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		// A killed process leaves the namespace once the kernel has torn it down: poll.
		<-time.After(20 * time.Millisecond)
	}
}

func netnsExists(name string) bool {
	_, err := os.Stat(filepath.Join("/run/netns", name))
	return err == nil
}

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// sweepStaleNetworks tears down networks whose test process is gone (killed by a timeout, a
// panic or a signal before its cleanup ran). The caller holds the lock.
func sweepStaleNetworks(t testing.TB) {
	paths, _ := filepath.Glob(filepath.Join(stateDir, "*.json"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var s netState
		if err := json.Unmarshal(b, &s); err != nil || s.PID <= 0 {
			continue
		}
		if st := startTime(s.PID); st != "" && st == s.Start {
			continue // its test still runs
		}
		if err := teardown(s); err != nil {
			t.Logf("a stale network of pid %d: %v", s.PID, err)
			continue
		}
		_ = os.Remove(p)
		t.Logf("removed the network of test process %d, which ended without cleaning up", s.PID)
	}
}

// startTime is field 22 of /proc/PID/stat (start time in clock ticks since boot), or "".
func startTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19] // fields after the command start at field 3
}

// freeSubnet picks a 10.213.X.0/24 that overlaps no address or route of the machine (other
// tests' bridges included: the caller holds the lock they take).
func freeSubnet() (netip.Prefix, error) {
	var used []netip.Prefix
	for _, args := range [][]string{{"-o", "-4", "addr", "show"}, {"-4", "route", "show", "table", "all"}} {
		out, err := exec.Command("ip", args...).Output()
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("ip %s: %v", strings.Join(args, " "), err)
		}
		for _, f := range strings.Fields(string(out)) {
			if p, err := netip.ParsePrefix(f); err == nil {
				used = append(used, p.Masked())
			} else if a, err := netip.ParseAddr(f); err == nil && a.Is4() {
				used = append(used, netip.PrefixFrom(a, 32))
			}
		}
	}
	start := rand.IntN(254)
	for k := range 254 {
		third := byte(1 + (start+k)%254)
		cand := netip.PrefixFrom(netip.AddrFrom4([4]byte{subnetBase[0], subnetBase[1], third, 0}), 24)
		free := true
		for _, u := range used {
			if u.Overlaps(cand) {
				free = false
				break
			}
		}
		if free {
			return cand, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("every /24 of %d.%d.0.0/16 overlaps an address or route of this machine", subnetBase[0], subnetBase[1])
}

// mustRun runs a command and fails t with its output unless it succeeds.
func mustRun(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
