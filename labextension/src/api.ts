/**
 * The REST API of the torchx_nb server extension (`/torchx-nb/api/`), as typed calls. Every
 * request goes through JupyterLab's ServerConnection, so Jupyter's token or cookie and the XSRF
 * header are added exactly as for JupyterLab's own calls.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { EventSourceMessage, fetchEventSource } from '@microsoft/fetch-event-source';

export type JobState =
  | 'UNSUBMITTED'
  | 'SUBMITTED'
  | 'PENDING'
  | 'RUNNING'
  | 'SUCCEEDED'
  | 'FAILED'
  | 'CANCELLED'
  | 'UNKNOWN';

export const TERMINAL: ReadonlySet<string> = new Set([
  'SUCCEEDED',
  'FAILED',
  'CANCELLED'
]);

export interface IJob {
  handle: string;
  scheduler: string;
  name: string;
  state: JobState;
  submitted: number;
  ended?: number | null;
  duration: number;
  /** Its phases: when it started, seconds queued and run, seconds its image took. */
  started?: number | null;
  queued?: number | null;
  ran?: number | null;
  build_seconds?: number | null;
  /** A preempted job's phases split by its attempts (the detail only): `ran 2:00 · held 0:05 · resumed 1:00`. */
  phases?: string;
  notebook?: string | null;
  notebook_path?: string | null;
  image?: string;
  msg?: string;
  /** The sweep this job is a trial of, its index in the grid and its parameters. */
  sweep?: string | null;
  trial?: number | null;
  params?: Record<string, string | number | boolean> | null;
  /** Its current attempt (from 1) and how often it was preempted (never a failure). */
  attempt?: number;
  preemptions?: number;
  /** On the event stream of a filtered list: whether the row passes the filters (the
   * server's own rules, the same as its search). */
  match?: boolean;
}

export interface IReplica {
  id: number;
  state: string;
  hostname?: string;
  exit_code?: number | null;
  msg?: string;
}

/** Why one replica failed: its headline, the next step, and its last log lines (masked). */
export interface IFailureCard {
  role: string;
  replica: number;
  exit_code?: number | null;
  signal?: string | null;
  oom: boolean;
  exception?: string | null;
  last_lines: string[];
  headline: string;
  /** What to do about it (how to raise a time limit), or empty. */
  next_step?: string;
}

/** One preemption of a job: when, why, when its next attempt resumed and from the checkpoint
 * written when (the job's own ledger), the work lost, and all of it as status says it. */
export interface IPreemption {
  at: number;
  why: string;
  resumed_at?: number | null;
  ckpt_at?: number | null;
  lost_s?: number | null;
  restored?: boolean | null;
  text: string;
}

export interface IJobDetail extends IJob {
  ui_url?: string | null;
  error?: string;
  roles: { role: string; replicas: IReplica[] }[];
  /** Once the job failed: a card per failing replica, the first failure first. */
  failures: IFailureCard[];
  /** Once it was preempted: each preemption, oldest first. */
  preempted?: IPreemption[];
}

export interface IJobsPage {
  jobs: IJob[];
  total: number;
  page: number;
  per_page: number;
  /** Where the next page starts (keyset paging), or null after the last. */
  next: string | null;
  counts: Record<string, number>;
  event_id: string;
}

export interface ILogs {
  handle: string;
  role: string;
  replica: number;
  lines: string[];
}

export interface IResult {
  handle: string;
  /** The value's short repr, or `raised TYPE: message`; null when there is none (yet). */
  result: string | null;
  location: string | null;
}

export interface IOutputs {
  handle: string;
  location: string | null;
  files: { path: string; size: number }[];
}

export interface IFilters {
  scheduler?: string;
  state?: string;
  q?: string;
}

const PREFIX = 'torchx-nb/api';

function settings(): ServerConnection.ISettings {
  return ServerConnection.makeSettings();
}

function url(path: string, query: Record<string, string | number | undefined> = {}): string {
  const s = settings();
  const params = Object.entries(query)
    .filter(([, v]) => v !== undefined && v !== '')
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`)
    .join('&');
  return URLExt.join(s.baseUrl, PREFIX, path) + (params ? `?${params}` : '');
}

function jobPath(handle: string, suffix = ''): string {
  return `jobs/${encodeURIComponent(handle)}${suffix}`;
}

/** A refused request: its HTTP status and the server's one-line reason. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string
  ) {
    super(message);
  }
}

async function call<T>(path: string, init: RequestInit = {}, query = {}): Promise<T> {
  const response = await ServerConnection.makeRequest(url(path, query), init, settings());
  const text = await response.text();
  let body: any = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!response.ok) {
    if (response.status === 404 && body === null) {
      throw new ApiError(
        404,
        'the torchx_nb server extension is not enabled ' +
          '(run: jupyter server extension enable torchx_nb.server, then restart Jupyter)'
      );
    }
    const reason = body?.reason || body?.message;
    throw new ApiError(response.status, reason || `${response.status} ${response.statusText}`);
  }
  return body as T;
}

/** One page of jobs, newest first; `after` (a page's `next`) continues after its last row. */
export function listJobs(filters: IFilters, perPage = 100, after?: string | null): Promise<IJobsPage> {
  return call<IJobsPage>('jobs', {}, { ...filters, per_page: perPage, after: after ?? undefined });
}

export function getJob(handle: string): Promise<IJobDetail> {
  return call<IJobDetail>(jobPath(handle));
}

export function getLogs(
  handle: string,
  role: string,
  replica: number,
  stream: string,
  tail: number,
  regex?: string
): Promise<ILogs> {
  return call<ILogs>(jobPath(handle, '/logs'), {}, { role, replica, stream, tail, regex });
}

export function getResult(handle: string): Promise<IResult> {
  return call<IResult>(jobPath(handle, '/result'));
}

export function getOutputs(handle: string): Promise<IOutputs> {
  return call<IOutputs>(jobPath(handle, '/outputs'));
}

/** Where one output file downloads from (Jupyter's login cookie authenticates the link). */
export function outputUrl(handle: string, path: string): string {
  return url(jobPath(handle, `/outputs/${encodeURIComponent(path)}`));
}

export function cancelJob(handle: string): Promise<unknown> {
  return call(jobPath(handle, '/cancel'), { method: 'POST' });
}

export interface IEventHandlers {
  job(row: IJob): void;
  counts(counts: Record<string, number>): void;
  connected(on: boolean): void;
  /** The server does not know our position (it restarted): reload the list. */
  reset(): void;
}

/**
 * Follows `/events` with `@microsoft/fetch-event-source` (server-sent events read through
 * JupyterLab's ServerConnection, so Jupyter's auth header and cookies are sent), resuming after
 * the last event id on reconnection, retrying with backoff. The filters make the server say
 * of each row whether it belongs to the list. Returns a function that stops it.
 */
export function followEvents(
  lastEventId: string,
  filters: IFilters,
  on: IEventHandlers
): () => void {
  const abort = new AbortController();
  const s = settings();
  let delay = 500;
  void fetchEventSource(url('events', { ...filters }), {
    signal: abort.signal,
    openWhenHidden: true,
    // the library keeps the id it last saw under this same lowercase key: one header, never
    // two ids joined by a comma (which a restarted server could only refuse)
    headers: lastEventId ? { 'last-event-id': lastEventId } : {},
    fetch: (input: RequestInfo | URL, init?: RequestInit) =>
      ServerConnection.makeRequest(String(input), { ...init, cache: 'no-store' }, s),
    async onopen(response: Response): Promise<void> {
      if (!response.ok) {
        throw new Error(`events: ${response.status}`);
      }
      delay = 500;
      on.connected(true);
    },
    onmessage(message: EventSourceMessage): void {
      if (message.event === 'reset') {
        on.reset();
      } else if (message.event === 'job' && message.data) {
        on.job(JSON.parse(message.data) as IJob);
      } else if (message.event === 'counts' && message.data) {
        on.counts(JSON.parse(message.data) as Record<string, number>);
      }
    },
    onclose(): void {
      on.connected(false);
      throw new Error('events: the server closed the stream'); // reconnect
    },
    onerror(): number {
      on.connected(false);
      delay = Math.min(delay * 2, 10_000);
      return delay;
    }
  });
  return () => abort.abort();
}

/** What `POST /jobs` takes: a notebook under the server's root and how to run it. */
export interface INotebookSubmission {
  notebook: string;
  parameters?: Record<string, unknown>;
  /** Values as the user typed them, read on the server as `-p` reads them. */
  typed_parameters?: Record<string, string>;
  scheduler?: string | null;
  cfg?: Record<string, string | number | boolean | string[]>;
  /** The options as the user typed them, read on the server as the CLI's `-cfg` reads them. */
  typed_cfg?: string | null;
  image?: string | null;
  resource?: string | null;
  cell_timeout?: number | null;
}

export interface ISchedulers {
  schedulers: string[];
  default: string;
}

/** Run a notebook as a job; its row (a 400's one-line reason as an ApiError). */
export function submitNotebook(body: INotebookSubmission): Promise<IJob> {
  return call<IJob>('jobs', { method: 'POST', body: JSON.stringify(body) });
}

export function getSchedulers(): Promise<ISchedulers> {
  return call<ISchedulers>('schedulers');
}

/** A notebook's parameters cell as the server's Python parser reads it. */
export interface INotebookParameters {
  notebook: string;
  /** Whether the notebook has a code cell tagged `parameters`. */
  cell: boolean;
  /** Each name it assigns, with its value's source exactly as written. */
  parameters: { name: string; value: string }[];
  /** Why the cell is not valid Python, else null. */
  error: string | null;
}

export function getParameters(notebook: string): Promise<INotebookParameters> {
  return call<INotebookParameters>('parameters', {}, { notebook });
}

/** Fetch a notebook job's executed notebook beside the one it ran; its path to open. */
export function fetchExecutedNotebook(handle: string): Promise<{ handle: string; path: string }> {
  return call(jobPath(handle, '/notebook'), { method: 'POST' });
}
