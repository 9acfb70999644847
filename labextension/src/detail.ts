/** One job in the main area: its state, replicas and a log view that follows the tail. */
import { Widget } from '@lumino/widgets';

import {
  ApiError,
  getJob,
  getLogs,
  getOutputs,
  getResult,
  IJob,
  IJobDetail,
  outputUrl,
  TERMINAL
} from './api';
import { attemptChip, badge, duration, el, size, submitted } from './format';
import { JobsModel } from './model';

const TAIL = 1000;
const FOLLOW_MS = 2000;

export interface IDetailActions {
  openNotebook(path: string): void;
  cancel(job: IJob): Promise<void>;
  /** Fetch a notebook job's executed notebook beside the original, and open it. */
  openExecuted(handle: string): Promise<void>;
}

export class JobView extends Widget {
  constructor(
    readonly handle: string,
    model: JobsModel,
    private actions: IDetailActions
  ) {
    super();
    this.addClass('tnb-detail');
    this.id = `torchx-nb-job-${handle.replace(/[^A-Za-z0-9_-]/g, '_')}`;
    this.title.label = handle.split('/').pop() ?? handle;
    this.title.caption = handle;
    this.title.closable = true;

    this._head = el('div', 'tnb-detail-head');
    this._replicas = el('table', 'tnb-replicas');
    const controls = el('div', 'tnb-log-controls');
    this._replica = el('select', 'tnb-log-replica jp-mod-styled');
    this._replica.setAttribute('aria-label', 'Replica');
    this._stream = el('select', 'tnb-log-stream jp-mod-styled');
    this._stream.setAttribute('aria-label', 'Stream');
    for (const s of ['combined', 'stdout', 'stderr']) {
      this._stream.append(new Option(s, s));
    }
    this._regex = el('input', 'tnb-log-regex jp-mod-styled');
    this._regex.placeholder = 'Filter (regex)';
    this._regex.setAttribute('aria-label', 'Filter logs');
    this._followState = el('span', 'tnb-follow');
    controls.append(el('span', 'tnb-label', 'Logs'), this._replica, this._stream, this._regex);
    controls.append(this._followState);
    this._log = el('pre', 'tnb-log');
    this._log.tabIndex = 0;
    this._results = el('div', 'tnb-results');
    this.node.append(this._head, this._replicas, this._results, controls, this._log);

    this._replica.onchange = () => this._restartLogs();
    this._stream.onchange = () => this._restartLogs();
    let timer = 0;
    this._regex.oninput = () => {
      window.clearTimeout(timer);
      timer = window.setTimeout(() => this._restartLogs(), 300);
    };
    model.jobChanged.connect((_, job) => {
      if (job.handle === this.handle && job.state !== this._job?.state) {
        void this.refresh();
      }
    }, this);
    void this.refresh();
  }

  dispose(): void {
    window.clearTimeout(this._timer);
    this._disposedFlag = true;
    super.dispose();
  }

  get job(): IJobDetail | null {
    return this._job;
  }

  /** Whether the job was deleted from the job store while this view was open. */
  get gone(): boolean {
    return this._gone;
  }

  async refresh(): Promise<void> {
    if (this._gone) {
      return;
    }
    try {
      this._job = await getJob(this.handle);
    } catch (e) {
      if (isGone(e)) {
        this._markGone();
      } else {
        this._head.replaceChildren(el('div', 'tnb-error', (e as Error).message));
      }
      return;
    }
    this._renderHead(this._job);
    this._renderReplicas(this._job);
    if (TERMINAL.has(this._job.state) && !this._resultsShown) {
      this._resultsShown = true;
      void this._renderResults();
    }
    if (!this._logsStarted) {
      this._logsStarted = true;
      void this._followLogs();
    }
  }

  /** The job left the job store (deleted): stop asking, say so, and offer nothing to do. */
  private _markGone(): void {
    this._gone = true;
    this._generation += 1;
    window.clearTimeout(this._timer);
    const title = el('div', 'tnb-detail-title');
    title.append(badge('GONE'), el('span', 'tnb-detail-name', this._job?.name ?? this.title.label));
    const cancel = el('button', 'tnb-cancel jp-mod-styled jp-mod-warn', 'Cancel job');
    cancel.disabled = true;
    const actions = el('div', 'tnb-detail-actions');
    actions.append(cancel);
    title.append(actions);
    const why = el(
      'div',
      'tnb-gone',
      `${this.handle} is no longer in the job store (it was deleted); there is nothing more to show.`
    );
    this._head.replaceChildren(title, why);
    this._replicas.replaceChildren();
    this._followState.textContent = 'stopped';
    this._followState.classList.remove('tnb-following');
  }

  private _renderHead(job: IJobDetail): void {
    const title = el('div', 'tnb-detail-title');
    title.append(badge(job.state), el('span', 'tnb-detail-name', job.name));
    const chip = attemptChip(job.attempt, job.preemptions);
    if (chip) {
      title.append(chip);
    }
    const actions = el('div', 'tnb-detail-actions');
    if (job.notebook_path) {
      const open = el('button', 'tnb-open-notebook jp-mod-styled', 'Open notebook');
      open.onclick = () => this.actions.openNotebook(job.notebook_path!);
      actions.append(open);
    }
    if (job.ui_url && /^https?:\/\//.test(job.ui_url)) {
      const link = el('a', 'tnb-ui-url jp-mod-styled', `Open in ${job.scheduler} console`);
      link.href = job.ui_url;
      link.target = '_blank';
      link.rel = 'noopener noreferrer';
      actions.append(link);
    }
    const cancel = el('button', 'tnb-cancel jp-mod-styled jp-mod-warn', 'Cancel job');
    cancel.disabled = TERMINAL.has(job.state);
    cancel.onclick = async () => {
      await this.actions.cancel(job);
      await this.refresh();
    };
    actions.append(cancel);
    title.append(actions);

    const facts = el('dl', 'tnb-facts');
    const add = (k: string, v: string | null | undefined): void => {
      if (v) {
        facts.append(el('dt', '', k), el('dd', `tnb-fact-${k.toLowerCase()}`, v));
      }
    };
    add('Handle', job.handle);
    add('Scheduler', job.scheduler);
    add('Submitted', `${submitted(job.submitted)} (${new Date(job.submitted * 1000).toISOString()})`);
    add('Duration', duration(job.duration));
    const phases = [
      job.build_seconds ? `built ${duration(job.build_seconds)}` : '',
      job.queued !== null && job.queued !== undefined ? `queued ${duration(job.queued)}` : '',
      job.ran !== null && job.ran !== undefined ? `ran ${duration(job.ran)}` : ''
    ].filter(Boolean);
    // a preempted job's run split by its attempts (ran · held · resumed), as the CLI says it
    add('Phases', job.phases ?? phases.join(' · '));
    add('Notebook', job.notebook_path ?? job.notebook);
    if (job.params && !job.sweep) {
      add(
        'Parameters',
        Object.entries(job.params)
          .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
          .join(' ')
      );
    }
    add('Image', job.image);
    if (job.ui_url && !/^https?:\/\//.test(job.ui_url)) {
      add('Log folder', job.ui_url.replace(/^file:\/\//, ''));
    }
    if (!job.failures?.length) {
      add('Message', job.msg);
    }
    add('Error', job.error);
    this._head.replaceChildren(title, facts, ...preemptionList(job), ...failureCards(job));
  }

  private _renderReplicas(job: IJobDetail): void {
    const head = el('tr');
    for (const h of ['Role', 'Replica', 'State', 'Host', 'Exit', 'Message']) {
      head.append(el('th', '', h));
    }
    const rows = [head];
    const options: [string, string][] = [];
    for (const role of job.roles) {
      for (const r of role.replicas) {
        const tr = el('tr');
        const state = el('td');
        state.append(badge(r.state));
        tr.append(
          el('td', '', role.role),
          el('td', '', String(r.id)),
          state,
          el('td', '', r.hostname ?? ''),
          el('td', '', r.exit_code === null || r.exit_code === undefined ? '' : String(r.exit_code)),
          el('td', 'tnb-replica-msg', r.msg ?? '')
        );
        rows.push(tr);
        options.push([`${role.role}/${r.id}`, `${role.role} ${r.id}`]);
      }
    }
    this._replicas.replaceChildren(...rows);
    const current = this._replica.value;
    if (options.map(o => o[0]).join() !== [...this._replica.options].map(o => o.value).join()) {
      this._replica.replaceChildren(...options.map(([v, label]) => new Option(label, v)));
      if (options.some(o => o[0] === current)) {
        this._replica.value = current;
      }
    }
  }

  /** Once the job has ended: its cell's result (the repr it wrote) and its output files. */
  private async _renderResults(): Promise<void> {
    const parts: HTMLElement[] = [];
    try {
      const [result, outputs] = await Promise.all([
        getResult(this.handle),
        getOutputs(this.handle)
      ]);
      if (result.result !== null) {
        const line = el('div', 'tnb-result');
        line.append(el('span', 'tnb-label', 'Result'), el('code', 'tnb-result-repr', result.result));
        parts.push(line);
      }
      const executed = outputs.files.find(f => !f.path.includes('/') && f.path.endsWith('.ipynb'));
      if (executed) {
        const open = el('button', 'tnb-open-executed jp-mod-styled jp-mod-accept', 'Open executed notebook');
        open.title = `Fetch ${executed.path} beside the notebook it ran (never overwriting), and open it`;
        open.onclick = () => void this.actions.openExecuted(this.handle);
        parts.push(open);
      }
      if (outputs.files.length) {
        parts.push(el('div', 'tnb-label', `Outputs (${outputs.files.length})`));
        const list = el('ul', 'tnb-outputs');
        for (const f of outputs.files) {
          const item = el('li', 'tnb-output');
          const link = el('a', 'tnb-output-link', f.path);
          link.href = outputUrl(this.handle, f.path);
          link.download = f.path.split('/').pop() ?? f.path;
          link.title = `Download ${f.path}`;
          item.append(link, el('span', 'tnb-output-size', size(f.size)));
          list.append(item);
        }
        parts.push(list);
      }
    } catch (e) {
      parts.push(el('div', 'tnb-error', `Outputs unavailable: ${(e as Error).message}`));
    }
    this._results.replaceChildren(...parts);
  }

  private _restartLogs(): void {
    window.clearTimeout(this._timer);
    this._log.textContent = '';
    this._generation += 1;
    void this._followLogs();
  }

  /** Polls the tail while the job is live, then reads it once more after it ends. */
  private async _followLogs(): Promise<void> {
    const generation = this._generation;
    const job = this._job;
    if (!job || this._disposedFlag) {
      return;
    }
    const [role, replica] = (this._replica.value || `${job.roles[0]?.role ?? job.name}/0`).split(
      /\/(?=\d+$)/
    );
    let regex: string | undefined = this._regex.value || undefined;
    if (regex) {
      try {
        new RegExp(regex);
      } catch {
        regex = undefined;
      }
    }
    const live = !TERMINAL.has(job.state);
    try {
      const logs = await getLogs(this.handle, role, Number(replica), this._stream.value, TAIL, regex);
      if (generation !== this._generation) {
        return;
      }
      const atBottom =
        this._log.scrollTop + this._log.clientHeight >= this._log.scrollHeight - 8;
      const text = logs.lines.length
        ? logs.lines.join('\n')
        : live
          ? '(no output yet)'
          : regex
            ? '(no line matches the filter)'
            : '(the job wrote no output)';
      this._log.classList.toggle('tnb-log-empty', !logs.lines.length);
      if (this._log.textContent !== text) {
        this._log.textContent = text;
        if (atBottom) {
          this._log.scrollTop = this._log.scrollHeight;
        }
      }
      this._log.classList.remove('tnb-error');
    } catch (e) {
      if (isGone(e)) {
        this._markGone();
        return;
      }
      this._log.textContent = (e as Error).message;
      this._log.classList.add('tnb-error');
    }
    this._followState.textContent = live ? 'following' : 'ended';
    this._followState.classList.toggle('tnb-following', live);
    if (live && generation === this._generation && !this._gone) {
      this._timer = window.setTimeout(() => void this._followLogs(), FOLLOW_MS);
    }
  }

  private _job: IJobDetail | null = null;
  private _head: HTMLElement;
  private _replicas: HTMLTableElement;
  private _replica: HTMLSelectElement;
  private _stream: HTMLSelectElement;
  private _regex: HTMLInputElement;
  private _followState: HTMLElement;
  private _log: HTMLPreElement;
  private _results: HTMLElement;
  private _resultsShown = false;
  private _timer = 0;
  private _generation = 0;
  private _logsStarted = false;
  private _disposedFlag = false;
  private _gone = false;
}

/** A card per failing replica: its headline, the next step, and its last lines as text. */
/** Each preemption of the job, in the words status uses (when, why, resumed when, from which
 * checkpoint, the work lost). */
function preemptionList(job: IJobDetail): HTMLElement[] {
  const events = job.preempted ?? [];
  if (!events.length) {
    return [];
  }
  const box = el('div', 'tnb-preemptions');
  const p = job.preemptions ?? events.length;
  box.append(el('div', 'tnb-preemptions-head', `Preemptions (${p}) — attempt ${job.attempt ?? 1}`));
  const list = el('ul');
  for (const e of events) {
    const item = el('li', 'tnb-preemption', e.text);
    item.dataset.at = String(e.at);
    list.append(item);
  }
  box.append(list);
  return [box];
}

function failureCards(job: IJobDetail): HTMLElement[] {
  return (job.failures ?? []).map(card => {
    const node = el('div', 'tnb-failure');
    node.append(el('div', 'tnb-failure-headline', card.headline));
    if (card.next_step) {
      node.append(el('div', 'tnb-failure-next', `next: ${card.next_step}`));
    }
    if (card.last_lines.length) {
      node.append(el('pre', 'tnb-failure-lines', card.last_lines.join('\n')));
    }
    return node;
  });
}

/** A 404 saying the job is not in the job store (not one its scheduler forgot). */
function isGone(e: unknown): boolean {
  return e instanceof ApiError && e.status === 404 && e.message === 'no such job';
}
