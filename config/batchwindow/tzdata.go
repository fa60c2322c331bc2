package batchwindow

// The agent's image carries no zoneinfo; the database in the binary makes every IANA zone resolve the
// same on every node (about 450 KB).
import _ "time/tzdata"
