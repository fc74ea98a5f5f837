// The consumer side: a background "drain" thread (started by the first event) pops records from
// the ring, turns them into frames together with what they refer to (DeviceInfo, ModuleMap,
// StackTable), adds Drops and Snapshot frames when needed, and writes the stream.
//
// Thread safety: PushRecord/FlushSoon from any thread; the life-cycle functions are called by
// agent.cc (init, fork child, exit) as documented there. Draining is serialized by one mutex
// that hooks never wait for (they only try it in the late phase of exit).
#ifndef FRAGSCOPE_INTERPOSE_DRAIN_H_
#define FRAGSCOPE_INTERPOSE_DRAIN_H_

#include "event_record.h"

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
void DrainAtExit();     // stop the thread, write everything; later events are written inline
void DrainWriteEnd();   // DrainAtExit, then the End frame
void DrainAfterFork();  // child: forget the parent's thread, lock and stream

}  // namespace fragscope::agent

#endif  // FRAGSCOPE_INTERPOSE_DRAIN_H_
