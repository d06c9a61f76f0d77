package worker

import (
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// maxPendingMigrationReports bounds the handshake reports kept while no
// Control stream is up.
const maxPendingMigrationReports = 256

// Handshake reports (MigrationReport) are events the Manager's migration
// saga waits for: one lost stalls a migration until its phase deadline
// aborts it. So a report made while no Control stream is up is kept, in
// order, and sent on the next stream right after its hello; so is a report
// that was queued on a stream that ended before sending it. At most
// maxPendingMigrationReports are kept: past that the oldest is dropped,
// with a log line (a Manager away that long has aborted those migrations
// anyway). A report that reaches a Manager late is harmless: the saga drops
// a report of a migration or phase it is no longer in.

// reportMigration sends a handshake report on the current Control stream,
// or keeps it for the next one.
func (a *Agent) reportMigration(r *managerv1.MigrationReport) {
	msg := &managerv1.WorkerMessage{Msg: &managerv1.WorkerMessage_Migration{Migration: r}}
	a.pubMu.Lock()
	defer a.pubMu.Unlock()
	if a.cur != nil && a.cur.ctx.Err() == nil {
		a.cur.enqueue(msg)
		return
	}
	a.keepMigrationReportLocked(msg)
}

// keepMigrationReportLocked keeps a report for the next stream; pubMu held.
func (a *Agent) keepMigrationReportLocked(msg *managerv1.WorkerMessage) {
	if len(a.migPending) >= maxPendingMigrationReports {
		old := a.migPending[0].GetMigration()
		a.logger().Warn("dropping the oldest kept migration report: no Control stream for too long",
			"job", old.GetJobId(), "role", old.GetRole(), "migration_id", old.GetMigrationId(), "kind", old.GetKind())
		a.migPending[0] = nil
		a.migPending = a.migPending[1:]
	}
	a.migPending = append(a.migPending, msg)
}

// flushMigrationReportsLocked queues the kept reports on a new stream
// (after its hello); pubMu held.
func (a *Agent) flushMigrationReportsLocked(s *session) {
	for _, m := range a.migPending {
		s.enqueue(m)
	}
	a.migPending = nil
}

// rescueMigrationReportsLocked takes the reports an ended stream had not
// sent: to the current stream if there is one, else kept; pubMu held.
func (a *Agent) rescueMigrationReportsLocked(s *session) {
	s.mu.Lock()
	left := s.queue
	s.queue = nil
	s.mu.Unlock()
	for _, o := range left {
		if o.msg.GetMigration() == nil && o.msg.GetNotice() == nil {
			continue
		}
		switch {
		case a.cur != nil && a.cur != s && a.cur.ctx.Err() == nil:
			a.cur.enqueue(o.msg)
		case o.msg.GetNotice() != nil:
			a.keepNoticeLocked(o.msg) // notices likewise (cluster.go)
		default:
			a.keepMigrationReportLocked(o.msg)
		}
	}
}
