package dynamo

import "hash/fnv"

// statusShard spreads active operations over StatusShards index partitions
// (FNV-1a of the id) so a busy table has no single hot index key.
func statusShard(operationID string) int {
	h := fnv.New32a()
	h.Write([]byte(operationID)) // hash.Hash.Write never fails
	return int(h.Sum32() % StatusShards)
}
