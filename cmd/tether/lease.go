package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/tetherhq/tether/controller/api"
)

func newLeaseCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{Use: "lease", Short: "Take, renew, release and show a workspace's writer lease"}
	var asJSON bool
	var req api.LeaseRequest
	var ttl, wait time.Duration
	print := func(l api.Lease) error {
		if asJSON {
			return c.printJSON(l)
		}
		c.printf("epoch %d held by %s until %s\n", l.Epoch, l.Holder, l.ExpiresAt.Local().Format(time.RFC3339))
		return nil
	}
	acquire := &cobra.Command{
		Use:   "acquire ID --holder NAME [--ttl DUR] [--wait DUR]",
		Short: "Take the lease; its epoch must accompany every write (--epoch or TETHER_EPOCH)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if req.Holder == "" {
				return usageError{fmt.Errorf("lease acquire needs --holder NAME")}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			req.TTL, req.Wait = ttl.String(), wait.String()
			l, err := cl.AcquireLease(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			return print(l)
		},
	}
	acquire.Flags().StringVar(&req.Holder, "holder", "", "who holds the lease (shown to others)")
	acquire.Flags().DurationVar(&wait, "wait", 0, "wait this long for a held lease to be released or expire")
	renew := &cobra.Command{
		Use:   "renew ID --epoch N [--ttl DUR]",
		Short: "Extend the lease you hold",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			epoch, err := c.requireEpoch()
			if err != nil {
				return err
			}
			l, err := cl.RenewLease(cmd.Context(), args[0], api.LeaseRequest{Epoch: epoch, TTL: ttl.String()})
			if err != nil {
				return err
			}
			return print(l)
		},
	}
	for _, sub := range []*cobra.Command{acquire, renew} {
		sub.Flags().DurationVar(&ttl, "ttl", 5*time.Minute, "how long the lease lasts unless renewed")
	}
	release := &cobra.Command{
		Use:   "release ID --epoch N",
		Short: "Give the lease up",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			epoch, err := c.requireEpoch()
			if err != nil {
				return err
			}
			return cl.ReleaseLease(cmd.Context(), args[0], epoch)
		},
	}
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show the live lease (error not_found when none is held)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			l, err := cl.GetLease(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return print(l)
		},
	}
	for _, sub := range []*cobra.Command{acquire, renew, show} {
		sub.Flags().BoolVar(&asJSON, "json", false, "print the lease as JSON")
	}
	cmd.AddCommand(acquire, renew, release, show)
	return cmd
}
