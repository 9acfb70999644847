/** The left-sidebar panel: every job, newest first, live, with filters and search. */
import { Widget } from '@lumino/widgets';

import { IJob, TERMINAL } from './api';
import { attemptChip, badge, basename, duration, el, submitted } from './format';
import { JobsModel } from './model';

/** Whether a job's clock runs: not once it ended, nor while nothing knows it (UNKNOWN). */
function ticks(state: string, ended: string | undefined): boolean {
  return !TERMINAL.has(state) && state !== 'UNKNOWN' && !ended;
}

/**
 * The duration a row shows. A running job's clock only goes forward: a row the model read
 * earlier (every render re-fills every row) never sets back what the tick already showed;
 * an ended or UNKNOWN job shows the server's figure, which stands still.
 */
function liveDuration(li: HTMLLIElement, job: IJob): number {
  if (!ticks(job.state, job.ended ? String(job.ended) : '') || li.dataset.handle !== job.handle) {
    return job.duration;
  }
  const base = Number(li.dataset.duration);
  const seen = Number(li.dataset.seen);
  if (!Number.isFinite(base) || !Number.isFinite(seen) || !ticks(li.dataset.state ?? '', '')) {
    return job.duration;
  }
  return Math.max(job.duration, base + (Date.now() / 1000 - seen));
}

const STATES = ['RUNNING', 'PENDING', 'SUBMITTED', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'UNKNOWN'];

export interface IPanelActions {
  openJob(handle: string): void;
  openNotebook(path: string): void;
  cancel(job: IJob): Promise<void>;
}

export class JobsPanel extends Widget {
  constructor(
    private model: JobsModel,
    private actions: IPanelActions
  ) {
    super();
    this.id = 'torchx-nb-jobs';
    this.addClass('tnb-panel');
    this.title.caption = 'TorchX jobs';

    const header = el('div', 'tnb-header');
    header.append(el('h2', 'tnb-title', 'TorchX jobs'));
    this._live = el('span', 'tnb-live');
    header.append(this._live);
    this.node.append(header);

    const filters = el('div', 'tnb-filters');
    this._search = el('input', 'tnb-search jp-mod-styled');
    this._search.type = 'search';
    this._search.placeholder = 'Search jobs';
    this._search.title = 'Search the name, handle, notebook and sweep of every job';
    this._search.setAttribute('aria-label', 'Search jobs');
    this._state = el('select', 'tnb-filter-state jp-mod-styled');
    this._state.setAttribute('aria-label', 'State');
    this._state.append(new Option('any state', ''));
    STATES.forEach(s => this._state.append(new Option(s.toLowerCase(), s)));
    this._scheduler = el('select', 'tnb-filter-scheduler jp-mod-styled');
    this._scheduler.setAttribute('aria-label', 'Scheduler');
    this._scheduler.append(new Option('any scheduler', ''));
    filters.append(this._search, this._state, this._scheduler);
    this.node.append(filters);

    this._summary = el('div', 'tnb-summary');
    this.node.append(this._summary);
    this._list = el('ul', 'tnb-jobs');
    this.node.append(this._list);
    this._more = el('button', 'tnb-more jp-mod-styled', 'Load more');
    this._more.onclick = () => void this.model.loadMore();
    this.node.append(this._more);

    let timer = 0;
    this._search.oninput = () => {
      window.clearTimeout(timer);
      timer = window.setTimeout(() => this._applyFilters(), 250);
    };
    this._state.onchange = () => this._applyFilters();
    this._scheduler.onchange = () => this._applyFilters();

    model.changed.connect(this._render, this);
    this._render();
    this._tick = window.setInterval(() => this._tickDurations(), 1000);
  }

  dispose(): void {
    window.clearInterval(this._tick);
    super.dispose();
  }

  private _applyFilters(): void {
    this.model.setFilters({
      q: this._search.value.trim() || undefined,
      state: this._state.value || undefined,
      scheduler: this._scheduler.value || undefined
    });
  }

  private _render(): void {
    const m = this.model;
    this._live.textContent = m.connected ? 'live' : m.connecting ? 'connecting…' : 'offline';
    this._live.classList.toggle('tnb-live-on', m.connected);
    for (const s of [...m.schedulers].sort()) {
      if (![...this._scheduler.options].some(o => o.value === s)) {
        this._scheduler.append(new Option(s, s));
      }
    }
    if (m.error) {
      this._summary.textContent = m.error;
      this._summary.classList.add('tnb-error');
    } else {
      this._summary.classList.remove('tnb-error');
      this._summary.textContent = !m.loaded
        ? 'Loading…'
        : `${m.total} job${m.total === 1 ? '' : 's'} · ${m.running} running`;
    }
    const rows = new Map<string, HTMLLIElement>();
    for (const li of [...this._list.children] as HTMLLIElement[]) {
      rows.set(li.dataset.handle ?? '', li);
    }
    const wanted = m.jobs.map(job => {
      const li = rows.get(job.handle) ?? el('li', 'tnb-job');
      rows.delete(job.handle);
      this._fill(li, job);
      return li;
    });
    rows.forEach(li => li.remove());
    wanted.forEach((li, i) => {
      if (this._list.children[i] !== li) {
        this._list.insertBefore(li, this._list.children[i] ?? null);
      }
    });
    if (m.loaded && !m.error && !m.jobs.length) {
      const empty = el(
        'li',
        'tnb-empty',
        m.filters.q || m.filters.state || m.filters.scheduler
          ? 'No job matches.'
          : 'No jobs yet. Run a %%torchx cell, `torchx-nb run`, or the Python API.'
      );
      empty.dataset.handle = '';
      this._list.append(empty);
    }
    this._more.hidden = !m.more;
  }

  private _fill(li: HTMLLIElement, job: IJob): void {
    const key = `${job.state}|${job.msg}|${job.notebook_path}|${job.name}|${job.sweep}|${job.attempt}|${job.preemptions}`;
    const shown = liveDuration(li, job); // before the row takes the job's new values
    li.dataset.handle = job.handle;
    li.dataset.state = job.state;
    li.dataset.submitted = String(job.submitted);
    li.dataset.ended = job.ended ? String(job.ended) : '';
    li.dataset.duration = String(shown);
    li.dataset.seen = String(Date.now() / 1000);
    if (li.dataset.key === key) {
      li.querySelector('.tnb-duration')!.textContent = duration(shown);
      return;
    }
    li.dataset.key = key;
    li.replaceChildren();
    li.title = job.msg ? `${job.handle}\n${job.msg}` : job.handle;
    li.tabIndex = 0;
    const top = el('div', 'tnb-row');
    top.append(badge(job.state), el('span', 'tnb-name', job.name));
    if (!TERMINAL.has(job.state)) {
      const cancel = el('button', 'tnb-cancel jp-mod-styled', 'Cancel');
      cancel.title = `Cancel ${job.name}`;
      cancel.onclick = event => {
        event.stopPropagation();
        void this.actions.cancel(job);
      };
      top.append(cancel);
    }
    const meta = el('div', 'tnb-row tnb-meta');
    meta.append(
      el('span', 'tnb-scheduler', job.scheduler),
      el('span', 'tnb-submitted', submitted(job.submitted)),
      el('span', 'tnb-duration', duration(shown))
    );
    if (job.notebook_path) {
      const link = el('a', 'tnb-notebook', basename(job.notebook_path));
      link.href = '#';
      link.title = `Open ${job.notebook_path}`;
      link.onclick = event => {
        event.preventDefault();
        event.stopPropagation();
        this.actions.openNotebook(job.notebook_path!);
      };
      meta.append(link);
    } else if (job.notebook) {
      meta.append(el('span', 'tnb-notebook-outside', basename(job.notebook)));
    }
    li.append(top, meta);
    const chip = attemptChip(job.attempt, job.preemptions);
    if (chip) {
      // a line of its own: the name and the times keep their room in a narrow panel
      const tried = el('div', 'tnb-row tnb-meta tnb-tried');
      tried.append(chip);
      li.append(tried);
    }
    if (job.sweep) {
      // a sweep's trial: its parameters; a click on the sweep shows all its trials
      const trial = el('div', 'tnb-row tnb-meta tnb-trial');
      const chip = el('a', 'tnb-sweep', `${job.sweep} #${job.trial ?? '?'}`);
      chip.href = '#';
      chip.title = `Show every trial of ${job.sweep}`;
      chip.onclick = event => {
        event.preventDefault();
        event.stopPropagation();
        this._search.value = job.sweep!;
        this._applyFilters();
      };
      const params = Object.entries(job.params ?? {})
        .map(([k, v]) => `${k}=${v}`)
        .join(' ');
      trial.append(chip, el('span', 'tnb-params', params));
      li.append(trial);
    }
    li.onclick = () => this.actions.openJob(job.handle);
    li.onkeydown = event => {
      if (event.key === 'Enter') {
        this.actions.openJob(job.handle);
      }
    };
  }

  /** Running jobs' durations go up every second without a server round trip; an ended or
   * UNKNOWN job's clock stands still. */
  private _tickDurations(): void {
    const now = Date.now() / 1000;
    for (const li of this._list.querySelectorAll<HTMLLIElement>('.tnb-job')) {
      if (!ticks(li.dataset.state ?? '', li.dataset.ended)) {
        continue;
      }
      const base = Number(li.dataset.duration) + (now - Number(li.dataset.seen));
      li.querySelector('.tnb-duration')!.textContent = duration(base);
    }
  }

  private _live: HTMLElement;
  private _search: HTMLInputElement;
  private _state: HTMLSelectElement;
  private _scheduler: HTMLSelectElement;
  private _summary: HTMLElement;
  private _list: HTMLUListElement;
  private _more: HTMLButtonElement;
  private _tick: number;
}
