// Package figures is what every benchmark prints and writes beside its figures, one way for all of
// them: the machine it ran on (so that figures from different machines and moments are not compared
// blindly), nearest-rank percentiles, durations in the units of a table, ratios against a baseline
// measured in the same run, and the JSON file a run can leave behind.
package figures
