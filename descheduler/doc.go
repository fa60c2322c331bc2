// Package descheduler is tandem-descheduler: it moves batch pods off nodes that run hot to nodes that
// run cold, reserving room on the cold node before each eviction. lowload decides which nodes are hot
// and cold and which pods leave; migration carries each move out as a Koordinator PodMigrationJob
// (reserve, evict, wait for the replacement to bind); config reads koord-descheduler's
// DeschedulerConfiguration (LowNodeLoad and MigrationController arguments). docs/descheduler.md says
// what is chosen and why.
package descheduler
