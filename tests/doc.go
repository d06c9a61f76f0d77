// Package tests holds the scenario tests: whole-system behaviour across a
// Manager member and its workers, in one process (internal/testcluster),
// across real processes (the durability test kills a norsk-manager with
// SIGKILL), and on the Docker engine where one answers.
package tests
