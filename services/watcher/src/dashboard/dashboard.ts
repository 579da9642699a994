import { type Log, numberSetting } from '@murmur/shared';
import type { Bus } from '@murmur/shared/bus';
import type { Hono } from 'hono';
import { dashboardAccess } from './access.js';
import { DashboardBoard } from './board.js';
import { dashboardRoutes } from './routes.js';

/**
 * The operator dashboard the watcher serves beside `/health` (`/dashboard`): the watcher already
 * hears every session's start and end, every delegation's completion and every executor's
 * heartbeat, so the page is drawn from what it hears, and kept live over SSE. Its access rule is
 * decided before anything is served (`access.ts`): a watcher configured to bind elsewhere without
 * a token refuses to start.
 */
export interface Dashboard {
  http: Hono;
  drain(): Promise<void>;
  close(): void;
}

export function startDashboard(options: { bus: Bus; log: Log; env: NodeJS.ProcessEnv; watcherId: string }): Dashboard {
  const access = dashboardAccess(options.env);
  const board = new DashboardBoard(options.bus, options.watcherId);
  const heartbeatMs = numberSetting(options.env, 'MURMUR_DASHBOARD_HEARTBEAT_MS', undefined, { unit: 'milliseconds' });
  const routes = dashboardRoutes({ bus: options.bus, log: options.log, board, access, ...(heartbeatMs ? { heartbeatMs } : {}) });
  options.log.info(
    { token_required: access.required },
    access.required ? 'dashboard on /dashboard, behind MURMUR_DASHBOARD_TOKEN' : 'dashboard on /dashboard (loopback)',
  );
  return { http: routes.app, drain: () => routes.drain(), close: () => board.close() };
}
