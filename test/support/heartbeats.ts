import type { ExecutorHeartbeat } from '@murmur/shared';

/** One session as an executor's heartbeat lists it: a made-up capsule, started now. */
export function heldSession(sessionId: string): ExecutorHeartbeat['sessions'][number] {
  return { session_id: sessionId, capsule_name: 'c', capsule_version: '1.0.0', pid: 1, process_start: '', started_at: new Date().toISOString() };
}
