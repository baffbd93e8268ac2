package sqlstore

import "testing"

func TestRebind(t *testing.T) {
	cases := []struct{ in, want string }{
		{`SELECT 1`, `SELECT 1`},
		{`a = ? AND b = ?`, `a = $1 AND b = $2`},
		{`CASE WHEN CAST(? AS TEXT) = '' THEN x ELSE ? END, y = '?', z = 'it''s ?', w = ?`,
			`CASE WHEN CAST($1 AS TEXT) = '' THEN x ELSE $2 END, y = '?', z = 'it''s ?', w = $3`},
	}
	for _, c := range cases {
		if got := postgresDialect.q(c.in); got != c.want {
			t.Errorf("postgres q(%q) = %q; want %q", c.in, got, c.want)
		}
		if got := postgresDialect.q(c.in); got != c.want { // cached
			t.Errorf("postgres q(%q) again = %q; want %q", c.in, got, c.want)
		}
		if got := sqliteDialect.q(c.in); got != c.in {
			t.Errorf("sqlite q(%q) = %q; want it unchanged", c.in, got)
		}
	}
}

func TestMigrationsNumbered(t *testing.T) {
	ms, err := ordered()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 2 || ms[0].name == "" {
		t.Fatalf("migrations = %+v", ms)
	}
	saved := migrations
	defer func() { migrations = saved }()
	addMigration(0, "zero")
	if _, err := ordered(); err == nil {
		t.Fatal("migration version 0 was accepted")
	}
	migrations = append(saved[:len(saved):len(saved)], saved[0])
	if _, err := ordered(); err == nil {
		t.Fatal("a duplicate migration version was accepted")
	}
}
