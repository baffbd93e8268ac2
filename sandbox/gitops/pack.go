package gitops

import (
	"context"
	"errors"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/revlist"
	"github.com/tetherhq/tether/protocol"
)

// maxHaves bounds the commits a pack may be asked to leave out.
const maxHaves = 64

// PackPlan is a pack ready to be written: the objects reachable from the wanted commit and
// from none of the haves the repository holds.
type PackPlan struct {
	r      *repo
	hashes []plumbing.Hash
}

// PlanPack opens the repository at root and lists the objects a pack of args holds. Close the
// plan when done.
func PlanPack(ctx context.Context, root string, args protocol.GitPackArgs) (*PackPlan, error) {
	want, err := parseCommit("want", args.Want)
	if err != nil {
		return nil, err
	}
	if len(args.Haves) > maxHaves {
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "%d haves: at most %d", len(args.Haves), maxHaves)
	}
	var haves []plumbing.Hash
	for _, h := range args.Haves {
		hh, err := parseCommit("have", h)
		if err != nil {
			return nil, err
		}
		haves = append(haves, hh)
	}
	r, err := open(root)
	if err != nil {
		return nil, err
	}
	ok, err := hasCommit(r, want)
	if err == nil && !ok {
		err = protocol.Errorf(protocol.CodeNotFound, "the repository holds no commit %s", args.Want)
	}
	if err != nil {
		r.close()
		return nil, err
	}
	present := haves[:0]
	for _, h := range haves {
		if ok, err := hasCommit(r, h); err != nil {
			r.close()
			return nil, err
		} else if ok {
			present = append(present, h)
		}
	}
	hashes, err := revlist.Objects(r.storage, []plumbing.Hash{want}, present)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		r.close()
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return nil, protocol.Errorf(protocol.CodeCorrupt, "the repository lacks objects of %s: %v", args.Want, err)
		}
		return nil, err
	}
	return &PackPlan{r: r, hashes: hashes}, nil
}

// Objects is how many objects the pack holds.
func (p *PackPlan) Objects() int { return len(p.hashes) }

// Write writes the pack (self-contained: no delta refers to an object outside it).
func (p *PackPlan) Write(w io.Writer) error {
	_, err := packfile.NewEncoder(w, p.r.storage, false).Encode(p.hashes, 10)
	return err
}

// Close releases the repository.
func (p *PackPlan) Close() { p.r.close() }
