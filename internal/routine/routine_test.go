package routine

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStopCancelsAndWaits(t *testing.T) {
	g := New(context.Background(), nil)
	release := make(chan struct{})
	started := make(chan struct{}, 3)
	for _, name := range []string{"reader", "writer", "writer"} {
		g.Go(name, func(ctx context.Context) {
			started <- struct{}{}
			<-ctx.Done()
			<-release
		})
	}
	for range 3 {
		<-started
	}
	if got, want := g.Running(), []string{"reader", "writer ×2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Running() = %v, want %v", got, want)
	}
	stopped := make(chan struct{})
	go func() { g.Stop(); close(stopped) }()
	<-g.Context().Done()
	select {
	case <-stopped:
		t.Fatal("Stop returned while routines were still running")
	default:
	}
	close(release)
	<-stopped
	if got := g.Running(); len(got) != 0 {
		t.Fatalf("Running() after Stop = %v", got)
	}
}

func TestNoRoutineStartsAfterStop(t *testing.T) {
	g := New(context.Background(), nil)
	g.Stop()
	if g.Go("late", func(context.Context) { t.Error("a routine ran after Stop") }) {
		t.Fatal("Go accepted a routine after Stop")
	}
}

func TestStopContextNamesWhatIsStuck(t *testing.T) {
	g := New(context.Background(), nil)
	release := make(chan struct{})
	g.Go("stuck", func(context.Context) { <-release })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := g.StopContext(ctx)
	if !errors.Is(err, context.Canceled) || err.Error() != "routines still running: [stuck]: context canceled" {
		t.Fatalf("StopContext = %v", err)
	}
	close(release)
	if err := g.StopContext(context.Background()); err != nil {
		t.Fatal(err)
	}
}
