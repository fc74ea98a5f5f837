// The consumer side: a background "drain" thread (started by the first event) pops records from
// the ring, turns them into frames together with what they refer to (DeviceInfo, ModuleMap,
// StackTable), adds Drops and Snapshot frames when needed, and writes the stream.
//
// Thread safety: PushRecord/FlushSoon from any thread; the life-cycle functions are called by
// agent.cc (init, fork child, exit) as documented there. Draining is serialized by one mutex
// that hooks never wait for (they only try it in the late phase of exit).
#ifndef FRAGSCOPE_INTERPOSE_DRAIN_H_
#define FRAGSCOPE_INTERPOSE_DRAIN_H_

#include "recording/event_record.h"

namespace fragscope::agent {

// Pushes one record (drops and counts it when the ring is full) and starts the drain thread on
// first use. After the exit sequence began, also drains inline.
void PushRecord(const EventRecord& record);

// Starts the background thread if it is not running yet (dormant agents: it serves the control
// socket). Cheap after the first call.
void EnsureBackgroundThread();

// Writes everything pushed so far before a failure returns to the program: from the calling
// thread when the drain lock is free, else by waiting for the drain thread, up to ~50 ms.
void FlushSoon();

// Life cycle (agent.cc). Either of the first two may run first at exit; both are safe to
// repeat.
void DrainAtExit();  // stop the thread, write everything; later events are written inline
// DrainAtExit, then the End frame (exit_status: End.exit_status, -1 when not known).
void DrainWriteEnd(int exit_status = -1);
void DrainAfterFork();  // child: forget the parent's thread, lock and stream

// exec in place: ships everything and ends the stream with End.exec, holding the drain lock
// (other threads' hooks never wait for it) until the exec replaces the image or fails. True
// when this image had a stream (the next image is then one higher). DrainAfterFailedExec
// takes the End back (a file is cut back to before it; a collector gets a resumed stream) and
// releases the lock.
bool DrainBeforeExec();
void DrainAfterFailedExec();

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_DRAIN_H_
