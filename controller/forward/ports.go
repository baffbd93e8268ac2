package forward

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Ports is a set of TCP ports, as ranges.
type Ports struct {
	ranges [][2]int
}

// ParsePorts reads a comma-separated list of ports and ranges ("5432,8000-8999"); "" is none.
func ParsePorts(s string) (Ports, error) {
	var p Ports
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := parsePort(lo)
		if err != nil {
			return Ports{}, err
		}
		b := a
		if isRange {
			if b, err = parsePort(hi); err != nil {
				return Ports{}, err
			}
			if b < a {
				return Ports{}, fmt.Errorf("port range %q runs backwards", part)
			}
		}
		p.ranges = append(p.ranges, [2]int{a, b})
	}
	slices.SortFunc(p.ranges, func(x, y [2]int) int { return x[0] - y[0] })
	return p, nil
}

// ParsePort reads one TCP port number (1-65535).
func ParsePort(s string) (int, error) { return parsePort(s) }

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q is not a port (1-65535)", s)
	}
	return n, nil
}

// Contains reports whether port is in the set.
func (p Ports) Contains(port int) bool {
	for _, r := range p.ranges {
		if port >= r[0] && port <= r[1] {
			return true
		}
	}
	return false
}

// Empty reports whether the set has no port.
func (p Ports) Empty() bool { return len(p.ranges) == 0 }

// String lists the set as ParsePorts reads it.
func (p Ports) String() string {
	parts := make([]string, len(p.ranges))
	for i, r := range p.ranges {
		parts[i] = strconv.Itoa(r[0])
		if r[1] != r[0] {
			parts[i] += "-" + strconv.Itoa(r[1])
		}
	}
	return strings.Join(parts, ",")
}
