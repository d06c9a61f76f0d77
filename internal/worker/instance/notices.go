package instance

// Kinds of WorkerNotice (InstanceNotice.kind).
const (
	noticeAdoptedUnlabelled = "adopted-unlabelled"
	noticeKeptUnlabelled    = "kept-unlabelled"
	noticeRemovedOrphan     = "removed-orphan"
	noticeRecreatedMissing  = "recreated-missing"
)
