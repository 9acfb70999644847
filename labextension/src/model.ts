/**
 * What the panel and the status bar show: the first page of jobs for the current filters, kept
 * live by the server's event stream, and how many jobs are in each state.
 */
import { ISignal, Signal } from '@lumino/signaling';

import { followEvents, IFilters, IJob, listJobs, TERMINAL } from './api';

const PAGE = 100;

export class JobsModel {
  readonly changed: ISignal<JobsModel, void>;
  readonly jobChanged: ISignal<JobsModel, IJob>;
  /** A job seen running (or submitted) while the panel watched has ended: once per job. */
  readonly jobEnded: ISignal<JobsModel, IJob>;

  jobs: IJob[] = [];
  total = 0;
  counts: Record<string, number> = {};
  schedulers = new Set<string>();
  filters: IFilters = {};
  error = '';
  connected = false;
  /** Until the event stream first opens or fails, the panel says "connecting…". */
  connecting = true;
  loaded = false;

  private _changed = new Signal<JobsModel, void>(this);
  private _jobChanged = new Signal<JobsModel, IJob>(this);
  private _jobEnded = new Signal<JobsModel, IJob>(this);
  /** Every job's last known state, whatever the filters, to tell an end seen live. */
  private _states = new Map<string, string>();
  private _since = Date.now() / 1000;
  private _pages = 1;
  private _next: string | null = null;
  private _stop: (() => void) | null = null;
  private _load = 0;
  private _retry = 0;
  /** Rows from the event stream not yet applied: the last one per job. */
  private _queue = new Map<string, IJob>();
  private _frame = 0;
  /** The stream followed now: events of one stopped since are ignored. */
  private _stream = 0;

  constructor() {
    this.changed = this._changed;
    this.jobChanged = this._jobChanged;
    this.jobEnded = this._jobEnded;
  }

  get running(): number {
    return this.counts['RUNNING'] ?? 0;
  }

  get active(): number {
    return Object.entries(this.counts)
      .filter(([state]) => !TERMINAL.has(state) && state !== 'UNKNOWN')
      .reduce((sum, [, n]) => sum + n, 0);
  }

  /** Loads the first page(s) for the filters, then follows the event stream from there. */
  async refresh(): Promise<void> {
    const load = ++this._load;
    try {
      let jobs: IJob[] = [];
      let page = null;
      let first = null;
      for (let p = 1; p <= this._pages; p++) {
        page = await listJobs(this.filters, PAGE, page?.next);
        first = first ?? page;
        jobs = jobs.concat(page.jobs);
        if (!page.next) {
          break;
        }
      }
      if (load !== this._load || !page || !first) {
        return;
      }
      this.jobs = jobs;
      this._next = page.next;
      this.total = page.total;
      this.counts = page.counts;
      this.error = '';
      this._retry = 0;
      this.loaded = true;
      jobs.forEach(j => {
        this.schedulers.add(j.scheduler);
        if (!this._states.has(j.handle)) {
          this._states.set(j.handle, j.state);
        }
      });
      this._changed.emit();
      this._follow(first.event_id);
    } catch (e) {
      if (load === this._load) {
        this.error = `Cannot list jobs: ${(e as Error).message}.`;
        this.loaded = true;
        this._changed.emit();
        // a passing failure (a restart, a busy server) heals by itself: ask again, slower
        // each time, unless the filters or another load have moved on
        this._retry = Math.min(this._retry * 2 || 1000, 10_000);
        window.setTimeout(() => {
          if (load === this._load) {
            void this.refresh();
          }
        }, this._retry);
      }
    }
  }

  setFilters(filters: IFilters): void {
    this.filters = filters;
    this._pages = 1;
    void this.refresh();
  }

  /** The next page, after the last row shown (keyset paging: no row twice, none skipped). */
  async loadMore(): Promise<void> {
    const load = this._load;
    const next = this._next;
    if (!next) {
      return;
    }
    try {
      const page = await listJobs(this.filters, PAGE, next);
      if (load !== this._load || next !== this._next) {
        return;
      }
      this._pages += 1;
      const shown = new Set(this.jobs.map(j => j.handle));
      this.jobs = this.jobs.concat(page.jobs.filter(j => !shown.has(j.handle)));
      this._next = page.next;
      this.total = page.total;
      page.jobs.forEach(j => this.schedulers.add(j.scheduler));
    } catch (e) {
      this.error = `Cannot list jobs: ${(e as Error).message}.`;
    }
    this._changed.emit();
  }

  /** Whether more rows match than are shown. */
  get more(): boolean {
    return this._next !== null;
  }

  dispose(): void {
    window.cancelAnimationFrame(this._frame);
    this._queue.clear();
    this._stop?.();
    this._stop = null;
    Signal.clearData(this);
  }

  /** A row older than the last one shown while more pages exist: "Load more" brings it. */
  private _beyondShown(job: IJob): boolean {
    const last = this.jobs[this.jobs.length - 1];
    return (
      this._next !== null &&
      last !== undefined &&
      (job.submitted < last.submitted ||
        (job.submitted === last.submitted && job.handle < last.handle))
    );
  }

  /** An end seen live: the job was known not to have ended, or it is new to this panel and
   * ended after the panel started watching (a job that ran between two polls). */
  private _noteEnd(job: IJob): void {
    const before = this._states.get(job.handle);
    this._states.set(job.handle, job.state);
    if (!TERMINAL.has(job.state) || (before !== undefined && TERMINAL.has(before))) {
      return;
    }
    if (before !== undefined || (job.ended ?? 0) >= this._since) {
      this._jobEnded.emit(job);
    }
  }

  /** Applies the queued rows at the next frame (or within 100 ms in a hidden tab, where
   * frames stop): one sort and one render per batch, whatever the events' rate. A batch
   * larger than the rows shown is a reload of the first page(s), so the list stays bounded. */
  private _enqueue(job: IJob): void {
    this._queue.set(job.handle, job);
    if (this._frame) {
      return;
    }
    let timer = 0;
    const apply = (): void => {
      window.cancelAnimationFrame(this._frame);
      window.clearTimeout(timer);
      this._frame = 0;
      this._apply();
    };
    this._frame = window.requestAnimationFrame(apply);
    timer = window.setTimeout(apply, 100);
  }

  private _apply(): void {
    const rows = [...this._queue.values()];
    this._queue.clear();
    if (rows.length > Math.max(this.jobs.length, PAGE)) {
      rows.forEach(job => this._noteEnd(job));
      void this.refresh();
      return;
    }
    let added = false;
    for (const job of rows) {
      added = this._upsert(job) || added;
    }
    if (added) {
      this.jobs.sort((a, b) => b.submitted - a.submitted || (a.handle < b.handle ? 1 : -1));
    }
    this._changed.emit();
  }

  /** One row from the stream; true when it added a row (the list needs a sort). */
  private _upsert(job: IJob): boolean {
    this._noteEnd(job);
    this.schedulers.add(job.scheduler);
    const index = this.jobs.findIndex(j => j.handle === job.handle);
    let added = false;
    // the server says whether a row belongs to the filtered list (its own search rules)
    const matches = job.match ?? true;
    delete job.match;
    if (index >= 0 && matches) {
      this.jobs[index] = job;
    } else if (index >= 0) {
      this.jobs.splice(index, 1);
      this.total -= 1;
    } else if (matches) {
      this.total += 1;
      if (!this._beyondShown(job)) {
        this.jobs.push(job);
        added = true;
      }
    }
    this._jobChanged.emit(job);
    return added;
  }

  /** Follows the stream from a page just loaded. Rows queued from the stream before it
   * (another filter's, or from before the page) are dropped: the page holds them, and the new
   * stream sends again whatever changed after the page's position. Applied later, a row the
   * old filter did not match took out a row the new list holds. */
  private _follow(eventId: string): void {
    this._stop?.();
    this._queue.forEach(job => this._noteEnd(job));
    this._queue.clear();
    const stream = ++this._stream;
    const current = (): boolean => stream === this._stream;
    let pending = false;
    const flush = (): void => {
      if (!pending) {
        pending = true;
        setTimeout(() => {
          pending = false;
          this._changed.emit();
        }, 30);
      }
    };
    this._stop = followEvents(eventId, this.filters, {
      job: row => {
        if (current()) {
          this._enqueue(row);
        }
      },
      counts: counts => {
        if (current()) {
          this.counts = counts;
          flush();
        }
      },
      connected: on => {
        if (current()) {
          this.connected = on;
          this.connecting = false;
          flush();
        }
      },
      reset: () => {
        if (current()) {
          this._queue.clear(); // rows from before the reset: the reload supersedes them
          void this.refresh();
        }
      }
    });
  }
}
