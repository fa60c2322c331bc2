// Package actuate holds, in its subpackages, the node loops that change running pods and the node between
// lifecycle calls: suppress (BE CPUs), evict (BE pods through the Eviction API), yield (BE threads'
// scheduling), quotaburst (LS CFS quota) and hostapp (host applications' cgroups). What measures the
// node lives in metrics/; what these loops write, in resource/.
package actuate
