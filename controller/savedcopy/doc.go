// Package savedcopy reads what receipts saved: a snapshot's stored archive, checked against
// its receipt as it flows and decrypted with the controller's key (Archives), verified whole,
// and indexed once per receipt (Indexes) so that a closed workspace's files can be listed,
// stat'ed and read out of its last receipt without holding its manifest in memory.
package savedcopy
