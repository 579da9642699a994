import {
  COMPLETION_NOT_AWAITED,
  type LaunchedChild,
  type Lifecycle,
  RPC_ERRORS,
  isCompletionMessage,
  isSafeContextId,
  SAFE_CONTEXT_ID_RULE,
  type RpcError,
  type SessionCall,
  type SessionReply,
  TERMINAL_TASK_STATES,
  type TaskMessage,
  type TaskState,
  type TaskView,
  newContextId,
  newMessageId,
  newTaskId,
} from '@murmur/shared';
import { cutLongStrings } from '../event-fit.js';
import type { EventFeed } from './event-feed.js';
import { PageTokens } from './page-tokens.js';

/**
 * The session's tasks, owned by the capsule host (a door keeps none): what `message/send`
 * accepts, rejects or resumes under `lifecycle.task_acceptance`, the queue the task loop takes
 * work from, and the input-required pause of `murmur:task/task#request-input`.
 *
 * Acceptance is upstream's: `none` takes no messages at all; `single` takes one task in the whole
 * session, and only while nothing else is running or waiting; `queue` takes a task while fewer
 * than `queue_depth` wait (the running one does not count). A refusal is a task in state
 * `rejected`, answered as a result, not an error: the client asked correctly, the capsule is busy.
 */

export interface Task {
  readonly id: string;
  readonly contextId: string;
  readonly messageId: string;
  readonly text: string;
  readonly traceparent: string | undefined;
  /** `x-murmur-forget-session` on the request: the context's harness session is dropped before the task runs. */
  readonly forgetSession?: boolean;
  /** Sent under the session's own token: its context's conversation is kept for this session alone (`context_scope`). */
  readonly sessionScoped?: boolean;
  state: TaskState;
  message?: string;
  prompt?: string;
  response?: string;
  /** Each with its number among the task's artifacts (`seq`), which names it the same in a stream and in the task. */
  readonly artifacts: Array<{ name: string; text: string; seq: number }>;
  readonly history: TaskMessage[];
  updatedAt: number;
  /** Set when the task was ended from outside (input timeout, cancel): the loop stops at its next step. */
  abortedWith?: string;
}

/**
 * The name this session keeps a task's context under (its history file, the driver's
 * continuation): its id, or for a task sent under the session's own token its id marked so
 * (`@token`, which no client's id can hold). What was said under an operator's token and under the
 * session's own then never share a history, even within one session.
 */
export function localContextKey(task: Pick<Task, 'contextId' | 'sessionScoped'>): string {
  return task.sessionScoped ? `${task.contextId}@token` : task.contextId;
}

interface InputWait {
  task: Task;
  resolve(text: string): void;
  reject(error: Error): void;
  timer: NodeJS.Timeout | undefined;
}

type SendCall = Extract<SessionCall, { method: 'send' }>;
type Answer = { task: TaskView } | { error: RpcError };

/** How many ended tasks `tasks/get` still knows; the oldest are forgotten first. */
const REMEMBERED_TASKS = 1000;
/**
 * The most of artifacts' text (in characters) the session keeps across its tasks for `tasks/get`:
 * past it, the oldest tasks' artifacts are let go first. A tool's output can be 16 MiB, and a long
 * session's ended tasks would otherwise keep every one of them in the host's memory for good (their
 * stream carried them as they came; the workdir and the trace keep what a tool wrote).
 */
const ARTIFACTS_KEPT_CHARS = 32 * 1024 * 1024;
/** The most of a task's history `tasks/get` returns unless asked for less. */
const HISTORY_LIMIT = 100;
/**
 * The most one reply about tasks carries (a task, or a page of `tasks/list`): under the bus's
 * 1 MiB per message, with room for the reply's envelope and for the escaping JSON adds on its way.
 */
const REPLY_BUDGET_BYTES = 640 * 1024;
/** What a cut string says of itself: the task's words are whole where the session keeps them. */
const CUT_FOR_REPLY = 'too long for one reply; the session’s own records hold the task whole';
/** Completions held while a delegation's launch is answered (`holdsEarly`). */
const EARLY_COMPLETIONS_HELD = 16;

/** Why a task a client canceled (`tasks/cancel`, `CancelTask`) ended: its status message, and what its loop was aborted with. */
export const CANCELED_BY_REQUEST = 'canceled by request';

export class TaskRegistry {
  private readonly tasks = new Map<string, Task>();
  /** The characters of artifact text all remembered tasks keep (`ARTIFACTS_KEPT_CHARS`). */
  private artifactChars = 0;
  private readonly pending: Task[] = [];
  private active: Task | undefined;
  private last: Task | undefined;
  private everAccepted = false;
  private inputWait: InputWait | undefined;
  private waiter: ((task: Task | undefined) => void) | undefined;
  private closed = false;
  private readonly pageTokens: PageTokens;

  /** Delegations a running task awaits (the model's `delegate-task`), by delegation id. */
  private readonly delegations = new Map<string, { task: Task; child: LaunchedChild; resolve(text: string): void; reject(error: Error): void }>();
  /** Delegations being launched, whose ids are not known here until the launch is answered. */
  private launching = 0;
  /** Completions that came while a launch was being answered, for a delegation no task awaits yet. */
  private readonly early: Array<() => void> = [];

  constructor(
    private readonly lifecycle: Pick<Lifecycle, 'task_acceptance' | 'queue_depth'>,
    private readonly feed: EventFeed,
    /** This session's id: a completion addressed to another is refused. */
    private readonly sessionId = '',
  ) {
    this.pageTokens = new PageTokens(sessionId);
  }

  /**
   * `message/send` and its kin: a delegated child's completion enters the task awaiting it (and
   * nothing else); otherwise resume the task waiting for input, accept a new one, or reject it.
   */
  send(call: SendCall): Answer {
    if (call.delegation_id !== undefined) return this.complete(call);
    if (this.lifecycle.task_acceptance === 'none') {
      return { error: { code: RPC_ERRORS.methodNotFound, message: 'Method not found: this capsule does not accept tasks (lifecycle.task_acceptance: none)' } };
    }
    if (call.context_id !== undefined && !isSafeContextId(call.context_id)) {
      return {
        error: {
          code: RPC_ERRORS.invalidParams,
          message: `Invalid params: contextId '${call.context_id.slice(0, 64)}' is not a plain name (${SAFE_CONTEXT_ID_RULE})`,
        },
      };
    }
    const waiting = this.inputWait;
    if (call.task_id !== undefined && call.task_id !== waiting?.task.id) {
      const named = this.tasks.get(call.task_id);
      if (!named) return { error: { code: RPC_ERRORS.taskNotFound, message: `Task not found: '${call.task_id}'` } };
      // The spec's error for a message to a task that has ended: the operation, not the params, is what cannot be.
      if (TERMINAL_TASK_STATES.has(named.state))
        return {
          error: {
            code: RPC_ERRORS.unsupportedOperation,
            message: `Unsupported operation: task '${call.task_id}' is ${named.state}, and a task that has ended takes no more messages; send without taskId to start a new one`,
          },
        };
      return { error: { code: RPC_ERRORS.invalidParams, message: `Invalid params: task '${call.task_id}' is ${named.state} and is not waiting for input` } };
    }
    // A message under the session's own token resumes only a task started under it: a task an
    // operator's token started holds a conversation the capsule's other sessions may share.
    const resumable = waiting && (call.context_scope !== 'session' || waiting.task.sessionScoped === true) ? waiting : undefined;
    if (waiting && !resumable && call.task_id === waiting.task.id)
      return {
        error: {
          code: RPC_ERRORS.invalidParams,
          message: `Invalid params: task '${call.task_id}' was not started under this session's own token, and takes no message sent with it`,
        },
      };
    // A message naming a task and another conversation is refused (the spec's MUST): which of the
    // two the client meant cannot be known.
    if (call.task_id !== undefined && call.context_id !== undefined && resumable && call.context_id !== resumable.task.contextId) {
      return {
        error: {
          code: RPC_ERRORS.invalidParams,
          message: `Invalid params: message.contextId '${call.context_id.slice(0, 64)}' is not the context of task '${call.task_id}' ('${resumable.task.contextId}')`,
        },
      };
    }
    // The waiting task takes a message that names it, or — upstream's rule, which clients written
    // for upstream rely on — one that names no task and no other conversation.
    if (resumable && (call.task_id !== undefined || call.context_id === undefined || call.context_id === resumable.task.contextId)) {
      this.inputWait = undefined;
      if (resumable.timer) clearTimeout(resumable.timer);
      const task = resumable.task;
      task.history.push({ role: 'user', message_id: call.message_id, text: call.text });
      this.transition(task, 'working', 'resumed');
      resumable.resolve(call.text);
      return { task: this.view(task) };
    }
    const task: Task = {
      id: newTaskId(),
      contextId: call.context_id ?? newContextId(),
      messageId: call.message_id,
      text: call.text,
      traceparent: call.traceparent,
      ...(call.forget_session ? { forgetSession: true } : {}),
      ...(call.context_scope === 'session' ? { sessionScoped: true } : {}),
      state: 'submitted',
      artifacts: [],
      history: [{ role: 'user', message_id: call.message_id, text: call.text }],
      updatedAt: Date.now(),
    };
    this.remember(task);
    if (!this.accepts()) {
      this.transition(task, 'rejected', 'task rejected: capsule is busy', true);
      return { task: this.view(task) };
    }
    this.everAccepted = true;
    this.transition(task, 'submitted', 'accepted');
    const waiter = this.waiter;
    if (waiter) {
      this.waiter = undefined;
      waiter(task);
    } else {
      this.pending.push(task);
    }
    return { task: this.view(task) };
  }

  private accepts(): boolean {
    if (this.closed) return false;
    if (this.lifecycle.task_acceptance === 'single') return !this.everAccepted && this.active === undefined && this.pending.length === 0;
    return this.pending.length < this.lifecycle.queue_depth;
  }

  /**
   * The next accepted task, waiting up to `timeoutMs` (forever when undefined) for one to
   * arrive; `undefined` when none came or the registry closed.
   */
  next(timeoutMs: number | undefined): Promise<Task | undefined> {
    const queued = this.pending.shift();
    if (queued) return Promise.resolve(queued);
    if (this.closed) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const timer =
        timeoutMs === undefined
          ? undefined
          : setTimeout(() => {
              this.waiter = undefined;
              resolve(undefined);
            }, timeoutMs);
      this.waiter = (task) => {
        if (timer) clearTimeout(timer);
        resolve(task);
      };
    });
  }

  /** A task that did not come over A2A (`task.md`), registered so `tasks/get` and the stream see it. */
  adopt(text: string, contextId: string = newContextId()): Task {
    const task: Task = {
      id: newTaskId(),
      contextId,
      messageId: newMessageId(),
      text,
      traceparent: undefined,
      state: 'submitted',
      artifacts: [],
      history: [{ role: 'user', message_id: newMessageId(), text }],
      updatedAt: Date.now(),
    };
    this.everAccepted = true;
    this.remember(task);
    return task;
  }

  begin(task: Task): void {
    this.active = task;
    this.last = task;
    this.transition(task, 'working', 'started');
  }

  /** The task's last status: `completed` with the response, or `failed` with why. */
  finish(task: Task, outcome: { state: 'completed'; response: string } | { state: 'failed' | 'canceled'; message: string }): void {
    if (this.active === task) this.active = undefined;
    if (TERMINAL_TASK_STATES.has(task.state)) return;
    if (outcome.state === 'completed') {
      task.response = outcome.response;
      task.history.push({ role: 'agent', message_id: newMessageId(), text: outcome.response });
      this.transition(task, 'completed', 'session ended', true, { response: outcome.response });
    } else {
      this.transition(task, outcome.state, outcome.message, true);
    }
  }

  /** A status event that changes nothing but the message (`inference turn 2`). */
  progress(task: Task, message: string): void {
    this.transition(task, task.state, message);
  }

  /** A tool result or hook artifact, kept on the task and streamed. */
  artifact(task: Task, name: string, text: string): void {
    // Counted on from the last one kept, so the oldest being let go renumbers nothing.
    const seq = (task.artifacts.at(-1)?.seq ?? -1) + 1;
    task.artifacts.push({ name, text, seq });
    this.artifactChars += text.length;
    if (task.artifacts.length > HISTORY_LIMIT) this.dropArtifacts(task, 1);
    this.keepArtifactsWithinBudget();
    this.feed.emit({ type: 'artifact', taskId: task.id, contextId: task.contextId, data: { id: task.id, artifact: { tool_name: name, content: text, seq } } });
  }

  chunk(task: Task, kind: 'text' | 'thinking', text: string, final = false): void {
    this.feed.emit({ type: kind, taskId: task.id, contextId: task.contextId, data: { id: task.id, text, final } });
  }

  /**
   * `request-input`: the task waits in `input-required` (its prompt visible to `tasks/get`)
   * until the next `message/send` answers it, or fails with `input-timeout`.
   */
  requestInput(task: Task, prompt: string, timeoutMs: number | undefined): Promise<string> {
    // A task that ended (canceled while a hook ran, say) never comes back to wait for input.
    if (task.abortedWith !== undefined || TERMINAL_TASK_STATES.has(task.state))
      return Promise.reject(new Error(`request-input: the task has ended (${task.abortedWith ?? task.state})`));
    if (this.inputWait) return Promise.reject(new Error('request-input: another request is already waiting for input'));
    return new Promise((resolve, reject) => {
      task.prompt = prompt;
      this.transition(task, 'input-required', prompt);
      const timer =
        timeoutMs === undefined
          ? undefined
          : setTimeout(() => {
              this.inputWait = undefined;
              task.abortedWith = 'input-timeout';
              this.finish(task, { state: 'failed', message: 'input-timeout' });
              reject(new Error('input-timeout'));
            }, timeoutMs);
      this.inputWait = {
        task,
        timer,
        resolve: (text) => {
          delete task.prompt;
          resolve(text);
        },
        reject,
      };
    });
  }

  /**
   * The guest that asked for input ended before an answer came (its call's deadline, a trap): the
   * task stops waiting and is `working` again, as its loop goes on with the failed tool call. Left
   * waiting, the session's next message would be taken as the answer nobody can read any more —
   * the new task lost, the old one set back to `working` even after it had ended.
   */
  abandonInput(task: Task, why: string): void {
    const wait = this.inputWait;
    if (wait?.task !== task) return;
    this.inputWait = undefined;
    if (wait.timer) clearTimeout(wait.timer);
    delete task.prompt;
    if (!TERMINAL_TASK_STATES.has(task.state)) this.transition(task, 'working', why);
    wait.reject(new Error(why));
  }

  /**
   * A completion: never a new task. It goes to the task that awaits its delegation, or it is
   * refused with -31002 naming why — a completion nobody awaits, or one addressed to another
   * session (a parent that restarted onto the same address), which is what the child records.
   */
  private complete(call: SendCall): Answer {
    const delegationId = call.delegation_id as string;
    if (call.completion_session !== this.sessionId) {
      return {
        error: {
          code: COMPLETION_NOT_AWAITED,
          message: `the completion of delegation ${delegationId} is addressed to session ${call.completion_session || '(none)'}, which is not the session answering here`,
        },
      };
    }
    const awaiting = this.delegations.get(delegationId);
    if (!awaiting) return { error: { code: COMPLETION_NOT_AWAITED, message: `no task of this session awaits delegation ${delegationId}` } };
    if (!isCompletionMessage(call.text, delegationId, awaiting.child)) {
      return {
        error: {
          code: RPC_ERRORS.invalidParams,
          message: `Invalid params: the completion of delegation ${delegationId} is not a completion message as the runtime writes one (status, duration, the child's workdir and result path, bounded detail); the task still awaits its completion`,
        },
      };
    }
    this.delegations.delete(delegationId);
    awaiting.task.history.push({ role: 'user', message_id: call.message_id, text: call.text });
    this.transition(awaiting.task, awaiting.task.state, `delegation ${delegationId} completed`);
    awaiting.resolve(call.text);
    // Whoever holds a delegation id (the child's guest among them) learns that it was taken, and
    // nothing of the parent's task: not its history, its artifacts or its messages.
    const task = awaiting.task;
    return {
      task: { id: task.id, context_id: task.contextId, state: task.state, artifacts: [], history: [], updated_at: new Date(task.updatedAt).toISOString() },
    };
  }

  /**
   * A delegation's launch has been asked for; the returned function is called once it has been
   * answered and, if it launched, awaited (`awaitDelegation`). A child can end, and its completion
   * come, before its launch is answered: that completion is held until then (`afterLaunches`).
   */
  beginDelegationLaunch(): () => void {
    this.launching += 1;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.launching -= 1;
      if (this.launching === 0) for (const retry of this.early.splice(0)) retry();
    };
  }

  /**
   * Whether a completion for `delegationId` should wait for the launches being answered: no task
   * awaits it yet, one may once they are, and there is room to hold it (`EARLY_COMPLETIONS_HELD`;
   * anyone can send a completion's headers, so the held are few).
   */
  holdsEarly(delegationId: string): boolean {
    return this.launching > 0 && !this.delegations.has(delegationId) && this.early.length < EARLY_COMPLETIONS_HELD;
  }

  /** Resolves once no launch is being answered (at once when none is). */
  afterLaunches(): Promise<void> {
    if (this.launching === 0) return Promise.resolve();
    return new Promise((resolve) => this.early.push(resolve));
  }

  /** The running task waits for a delegation's completion; the text is what the child's runtime (or its watcher) posted. */
  awaitDelegation(task: Task, delegationId: string, child: LaunchedChild): Promise<string> {
    return new Promise((resolve, reject) => {
      this.delegations.set(delegationId, { task, child, resolve, reject });
    });
  }

  /** What stops the running task's work at once (set by the agent session): its guests, its harness. */
  private stopRunning: (task: Task) => void = () => {};

  whenRunningCanceled(stop: (task: Task) => void): void {
    this.stopRunning = stop;
  }

  /**
   * `tasks/cancel`: any task that has not ended. One waiting to run leaves the queue; one waiting
   * for input stops waiting; the running one is ended now — its guest calls abandoned, its loop
   * stopping at its next step — and the session goes on with its next task. An ended one is -32002.
   */
  cancel(taskId: string): Answer {
    const task = this.tasks.get(taskId);
    if (!task) return { error: { code: RPC_ERRORS.taskNotFound, message: `Task not found: '${taskId}'` } };
    const index = this.pending.indexOf(task);
    if (index >= 0) {
      this.pending.splice(index, 1);
      this.finish(task, { state: 'canceled', message: CANCELED_BY_REQUEST });
      return { task: this.view(task) };
    }
    if (this.inputWait?.task === task) {
      const wait = this.inputWait;
      this.inputWait = undefined;
      if (wait.timer) clearTimeout(wait.timer);
      task.abortedWith = CANCELED_BY_REQUEST;
      this.finish(task, { state: 'canceled', message: CANCELED_BY_REQUEST });
      wait.reject(new Error('the task was canceled while waiting for input'));
      return { task: this.view(task) };
    }
    if (this.active === task && !TERMINAL_TASK_STATES.has(task.state)) {
      task.abortedWith = CANCELED_BY_REQUEST;
      this.finish(task, { state: 'canceled', message: CANCELED_BY_REQUEST });
      // A delegation it awaits is awaited no more: its tool call ends now, and a completion that
      // comes later finds no task awaiting it (-31002), as the child then records.
      for (const [id, awaiting] of this.delegations) {
        if (awaiting.task !== task) continue;
        this.delegations.delete(id);
        awaiting.reject(new Error(CANCELED_BY_REQUEST));
      }
      this.stopRunning(task);
      return { task: this.view(task) };
    }
    return { error: { code: RPC_ERRORS.taskNotCancelable, message: `Task cannot be canceled: '${taskId}' is ${task.state}` } };
  }

  get(taskId: string | undefined, historyLength?: number): Answer {
    const task = taskId === undefined ? (this.active ?? this.last) : this.tasks.get(taskId);
    if (!task)
      return {
        error: {
          code: RPC_ERRORS.taskNotFound,
          message: taskId === undefined ? 'Task not found: this session has no task yet' : `Task not found: '${taskId}'`,
        },
      };
    return { task: this.view(task, historyLength) };
  }

  /**
   * A page of the tasks it remembers, most recently updated first and then by id, so that a cursor
   * (the last task of a page) says exactly where the next page starts even while tasks change.
   */
  list(query: Extract<SessionCall, { method: 'list' }>): SessionReply {
    type Position = Pick<Task, 'updatedAt' | 'id'>;
    const after = query.page_token === undefined ? undefined : this.pageTokens.read(query.page_token);
    if (query.page_token !== undefined && !after)
      return {
        error: {
          code: RPC_ERRORS.invalidParams,
          message: "Invalid params: pageToken: not a page token this session's ListTasks gave: list again from the first page",
        },
      };
    const newestFirst = (a: Position, b: Position): number => b.updatedAt - a.updatedAt || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0);
    const matching = [...this.tasks.values()]
      .filter(
        (task) =>
          (query.context_id === undefined || task.contextId === query.context_id) &&
          (query.state === undefined || task.state === query.state) &&
          (query.updated_after_ms === undefined || task.updatedAt >= query.updated_after_ms),
      )
      .sort(newestFirst);
    const start = after ? matching.findIndex((task) => newestFirst(task, { updatedAt: after.updated_at_ms, id: after.id }) > 0) : 0;
    const candidates = start < 0 ? [] : matching.slice(start, start + query.page_size);
    // A page is cut short, and continues on the next, where its tasks would outgrow what one
    // reply may carry over the bus: two tasks of 600 KB made every listing of the session fail.
    const views: TaskView[] = [];
    let last: Task | undefined;
    let bytes = 0;
    for (const task of candidates) {
      // Each view fits a reply alone (`view`), so a page always holds at least its first task; one
      // listed without its artifacts is fitted without them, so they cost it none of its history.
      const view = this.view(task, query.history_length, query.include_artifacts === true);
      const size = Buffer.byteLength(JSON.stringify(view));
      if (views.length > 0 && bytes + size > REPLY_BUDGET_BYTES) break;
      bytes += size;
      last = task;
      views.push(view);
    }
    const more = start >= 0 && start + views.length < matching.length;
    return {
      tasks: views,
      total_size: matching.length,
      ...(more && last ? { next_page_token: this.pageTokens.issue({ updated_at_ms: last.updatedAt, id: last.id }) } : {}),
    };
  }

  get isClosed(): boolean {
    return this.closed;
  }

  has(taskId: string): boolean {
    return this.tasks.has(taskId);
  }

  /** The session is ending: nothing more is accepted, and tasks that never ran say so. */
  close(reason: string): void {
    this.closed = true;
    for (const [id, awaiting] of this.delegations) {
      this.delegations.delete(id);
      awaiting.reject(new Error(reason));
    }
    for (const task of this.pending.splice(0)) this.finish(task, { state: 'failed', message: reason });
    const wait = this.inputWait;
    if (wait) {
      this.inputWait = undefined;
      if (wait.timer) clearTimeout(wait.timer);
      wait.task.abortedWith = reason;
      this.finish(wait.task, { state: 'failed', message: reason });
      wait.reject(new Error(reason));
    }
    const waiter = this.waiter;
    this.waiter = undefined;
    waiter?.(undefined);
  }

  /** `task` as a reply carries it, fitted to one reply (`fitTaskView`); `withArtifacts` false leaves them out. */
  view(task: Task, historyLength = HISTORY_LIMIT, withArtifacts = true): TaskView {
    return fitTaskView({
      id: task.id,
      context_id: task.contextId,
      state: task.state,
      ...(task.message !== undefined ? { message: task.message } : {}),
      ...(task.prompt !== undefined && task.state === 'input-required' ? { prompt: task.prompt } : {}),
      ...(task.response !== undefined ? { response: task.response } : {}),
      artifacts: withArtifacts ? [...task.artifacts] : [],
      history: historyLength === 0 ? [] : task.history.slice(-historyLength),
      updated_at: new Date(task.updatedAt).toISOString(),
    });
  }

  private remember(task: Task): void {
    this.tasks.set(task.id, task);
    if (this.tasks.size <= REMEMBERED_TASKS) return;
    for (const [id, old] of this.tasks) {
      if (TERMINAL_TASK_STATES.has(old.state)) {
        this.tasks.delete(id);
        this.dropArtifacts(old, old.artifacts.length);
        return;
      }
    }
  }

  /** Lets go of the oldest artifacts, oldest task first, while more than `ARTIFACTS_KEPT_CHARS` are kept. */
  private keepArtifactsWithinBudget(): void {
    for (const task of this.tasks.values()) {
      if (this.artifactChars <= ARTIFACTS_KEPT_CHARS) return;
      while (task.artifacts.length > 0 && this.artifactChars > ARTIFACTS_KEPT_CHARS) this.dropArtifacts(task, 1);
    }
  }

  private dropArtifacts(task: Task, count: number): void {
    for (const dropped of task.artifacts.splice(0, count)) this.artifactChars -= dropped.text.length;
  }

  private transition(task: Task, state: TaskState, message: string, final = false, extra: Record<string, unknown> = {}): void {
    task.state = state;
    task.message = message;
    task.updatedAt = Date.now();
    this.feed.emit({
      type: 'status',
      taskId: task.id,
      contextId: task.contextId,
      state,
      final,
      data: { id: task.id, context_id: task.contextId, status: { state, message, ...extra }, final },
    });
  }
}

/**
 * `view` as one reply can carry it: whole when it fits `budget`; else without as many of its
 * oldest history entries as must go; else with its long strings cut, each saying so, shorter each
 * round; else without its oldest artifacts. A task's words are the guest's and its client's to
 * size: a 400 KB message to an agent that answered at length made its task unreadable — the
 * blocking `SendMessage`'s reply and every `GetTask` failed over the bus's limit, though the task
 * had run. The session's own records (its result, its trace, its conversation) keep what a reply
 * leaves out.
 */
export function fitTaskView(view: TaskView, budget = REPLY_BUDGET_BYTES): TaskView {
  const bytes = (value: unknown): number => Buffer.byteLength(JSON.stringify(value));
  let size = bytes(view);
  if (size <= budget) return view;
  const history = [...view.history];
  while (history.length > 0 && size > budget) size -= bytes(history.shift()) + 1;
  let fitted: TaskView = { ...view, history };
  // Each round keeps half as much of every long string (never under 1 024 characters of one).
  for (let share = budget; size > budget && share >= 8 * 1024; share /= 2) {
    fitted = cutLongStrings({ ...view, history }, share, CUT_FOR_REPLY) as TaskView;
    size = bytes(fitted);
  }
  const artifacts = [...fitted.artifacts];
  while (artifacts.length > 0 && size > budget) size -= bytes(artifacts.shift()) + 1;
  // The sizes above are counted down entry by entry; the last word is the reply's own.
  let result: TaskView = { ...fitted, artifacts };
  while (result.artifacts.length + result.history.length > 0 && bytes(result) > budget)
    result = result.history.length > 0 ? { ...result, history: result.history.slice(1) } : { ...result, artifacts: result.artifacts.slice(1) };
  return result;
}
