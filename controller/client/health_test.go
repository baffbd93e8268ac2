package client

import (
	"testing"

	"github.com/tetherhq/tether/protocol"
)

func TestParseAddr(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7420":          "http://127.0.0.1:7420",
		"localhost:7420":          "http://localhost:7420",
		"[::1]:7420":              "http://[::1]:7420",
		"http://127.0.0.1:7420":   "http://127.0.0.1:7420",
		"http://127.0.0.1:7420/":  "http://127.0.0.1:7420",
		"https://tether.example":  "https://tether.example",
		" http://host:1 ":         "http://host:1",
		"https://tether.example/": "https://tether.example",
	} {
		u, err := ParseAddr(in)
		if err != nil || u.String() != want {
			t.Errorf("ParseAddr(%q) = %v, %v; want %s", in, u, err, want)
		}
	}
	for _, in := range []string{"", "ftp://host:1", "http://", "http://host:1/v1", "host:1/x", "http://u:p@host:1",
		"http://host:1?x=1", "host:", "unix:///run/x.sock", "http://host:1#f"} {
		if u, err := ParseAddr(in); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
			t.Errorf("ParseAddr(%q) = %v, %v; want invalid_argument", in, u, err)
		}
	}
}
