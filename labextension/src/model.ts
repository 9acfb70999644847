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
  private _pages = 1;
  private _stop: (() => void) | null = null;
  private _load = 0;
  private _retry = 0;

  constructor() {
    this.changed = this._changed;
    this.jobChanged = this._jobChanged;
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
      for (let p = 1; p <= this._pages; p++) {
        page = await listJobs(this.filters, p, PAGE);
        jobs = jobs.concat(page.jobs);
        if (jobs.length >= page.total) {
          break;
        }
      }
      if (load !== this._load || !page) {
        return;
      }
      this.jobs = jobs;
      this.total = page.total;
      this.counts = page.counts;
      this.error = '';
      this._retry = 0;
      this.loaded = true;
      jobs.forEach(j => this.schedulers.add(j.scheduler));
      this._changed.emit();
      this._follow(page.event_id);
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

  loadMore(): void {
    this._pages += 1;
    void this.refresh();
  }

  dispose(): void {
    this._stop?.();
    this._stop = null;
    Signal.clearData(this);
  }

  private _matches(job: IJob): boolean {
    const { scheduler, state, q } = this.filters;
    if (scheduler && job.scheduler !== scheduler) {
      return false;
    }
    if (state && job.state !== state) {
      return false;
    }
    if (q) {
      const text = `${job.handle} ${job.name} ${job.notebook ?? ''}`.toLowerCase();
      if (!text.includes(q.toLowerCase())) {
        return false;
      }
    }
    return true;
  }

  private _upsert(job: IJob): void {
    this.schedulers.add(job.scheduler);
    const index = this.jobs.findIndex(j => j.handle === job.handle);
    const matches = this._matches(job);
    if (index >= 0 && matches) {
      this.jobs[index] = job;
    } else if (index >= 0) {
      this.jobs.splice(index, 1);
      this.total -= 1;
    } else if (matches) {
      this.jobs.push(job);
      this.jobs.sort((a, b) => b.submitted - a.submitted);
      this.total += 1;
    }
    this._jobChanged.emit(job);
  }

  private _follow(eventId: string): void {
    this._stop?.();
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
    this._stop = followEvents(eventId, {
      job: row => {
        this._upsert(row);
        flush();
      },
      counts: counts => {
        this.counts = counts;
        flush();
      },
      connected: on => {
        this.connected = on;
        this.connecting = false;
        flush();
      },
      reset: () => {
        void this.refresh();
      }
    });
  }
}
