package forward

import "testing"

func TestParsePorts(t *testing.T) {
	p, err := ParsePorts(" 8000-8999, 5432 ,,")
	if err != nil {
		t.Fatal(err)
	}
	for port, want := range map[int]bool{5432: true, 8000: true, 8500: true, 8999: true, 7999: false, 9000: false, 5433: false, 0: false} {
		if got := p.Contains(port); got != want {
			t.Errorf("Contains(%d) = %v, want %v", port, got, want)
		}
	}
	if s := p.String(); s != "5432,8000-8999" {
		t.Errorf("String() = %q", s)
	}
	if p.Empty() {
		t.Error("a set of ports is Empty")
	}
	none, err := ParsePorts("")
	if err != nil || !none.Empty() || none.Contains(80) {
		t.Fatalf("ParsePorts(\"\") = %+v, %v", none, err)
	}
	for _, bad := range []string{"abc", "0", "70000", "-1", "10-5", "1-", "80-x", "1:2"} {
		if _, err := ParsePorts(bad); err == nil {
			t.Errorf("ParsePorts(%q) accepted", bad)
		}
	}
	for in, want := range map[string]int{"1": 1, "65535": 65535, " 80 ": 80} {
		if got, err := ParsePort(in); err != nil || got != want {
			t.Errorf("ParsePort(%q) = %d, %v", in, got, err)
		}
	}
}
