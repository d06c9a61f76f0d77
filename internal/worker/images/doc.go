// Package images is a worker's image inventory: what its runtime holds (a
// runtime.Images, docker), with when this worker last used each image
// (DataDir/images.json), reported in the hello and again whenever the
// engine's image events say it changed; and the prefetch_images command,
// whose refs are pulled one after the other, each outcome reported with the
// inventory after it. A runtime without images (process) reports none and
// refuses prefetches.
package images
