/**
 * "Run as job…": a dialog body asking how to run a notebook (scheduler, its parameters
 * pre-filled from the cell tagged `parameters`, image, named resource, options, cell time
 * limit), and what it becomes as a `POST /jobs` body.
 */
import { Widget } from '@lumino/widgets';

import { INotebookSubmission, ISchedulers } from './api';
import { el } from './format';

const SECRET = /(pass(word)?|secret|token|api[_-]?key|credential|private[_-]?key)/i;

/** `NAME = VALUE` lines of a notebook's parameters cell, in order (VALUE as written). */
export function parametersOf(cells: { cell_type: string; source: string | string[]; metadata?: any }[]): [string, string][] {
  const cell = cells.find(
    c => c.cell_type === 'code' && (c.metadata?.tags ?? []).includes('parameters')
  );
  if (!cell) {
    return [];
  }
  const source = Array.isArray(cell.source) ? cell.source.join('') : cell.source;
  const out: [string, string][] = [];
  for (const line of source.split('\n')) {
    const m = /^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*(#.*)?$/.exec(line);
    if (m) {
      out.push([m[1], m[2]]);
    }
  }
  return out;
}

/** A parameter's text as the value it means: Python's True/False/None, a quoted string, a
 * number, a JSON list or object; anything else is the text itself. */
export function literal(text: string): unknown {
  const t = text.trim();
  if (t === 'True' || t === 'true') {
    return true;
  }
  if (t === 'False' || t === 'false') {
    return false;
  }
  if (t === 'None' || t === 'null') {
    return null;
  }
  const quoted = /^'((?:[^'\\]|\\.)*)'$/.exec(t) ?? /^"((?:[^"\\]|\\.)*)"$/.exec(t);
  if (quoted) {
    return quoted[1].replace(/\\(['"\\])/g, '$1');
  }
  if (/^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(t)) {
    return Number(t);
  }
  if (/^[[{]/.test(t)) {
    try {
      return JSON.parse(t.replace(/'/g, '"'));
    } catch {
      return t;
    }
  }
  return t;
}

export class RunNotebookForm extends Widget {
  constructor(
    readonly path: string,
    schedulers: ISchedulers,
    parameters: [string, string][]
  ) {
    super();
    this.addClass('tnb-run-form');
    const row = (label: string, input: HTMLElement): HTMLElement => {
      const line = el('label', 'tnb-run-row');
      line.append(el('span', 'tnb-run-label', label), input);
      return line;
    };
    this._scheduler = el('select', 'tnb-run-scheduler jp-mod-styled');
    for (const s of schedulers.schedulers) {
      this._scheduler.append(new Option(s, s, s === schedulers.default, s === schedulers.default));
    }
    this._image = el('input', 'tnb-run-image jp-mod-styled');
    this._image.placeholder = 'default image';
    this._resource = el('input', 'tnb-run-resource jp-mod-styled');
    this._resource.placeholder = 'e.g. cpu.small, gpu.small';
    this._cfg = el('input', 'tnb-run-cfg jp-mod-styled');
    this._cfg.placeholder = 'k=v,k2=v2';
    this._timeout = el('input', 'tnb-run-timeout jp-mod-styled');
    this._timeout.type = 'number';
    this._timeout.min = '1';
    this._timeout.placeholder = 'none';
    const params = el('fieldset', 'tnb-run-params');
    params.append(el('legend', '', parameters.length ? 'Parameters' : 'Parameters (no cell tagged "parameters")'));
    for (const [name, value] of parameters) {
      const input = el('input', 'tnb-run-param jp-mod-styled');
      input.name = name;
      input.value = value;
      input.setAttribute('aria-label', name);
      if (SECRET.test(name)) {
        input.type = 'password';
      }
      this._params.push(input);
      params.append(row(name, input));
    }
    this.node.append(
      el('div', 'tnb-run-path', path),
      row('Scheduler', this._scheduler),
      params,
      row('Image', this._image),
      row('Resource (-h)', this._resource),
      row('Options (-cfg)', this._cfg),
      row('Cell time limit (s)', this._timeout)
    );
  }

  getValue(): INotebookSubmission {
    const cfg: Record<string, string> = {};
    for (const pair of this._cfg.value.split(',')) {
      const [k, ...v] = pair.split('=');
      if (k.trim()) {
        cfg[k.trim()] = v.join('=').trim();
      }
    }
    const parameters: Record<string, unknown> = {};
    for (const input of this._params) {
      parameters[input.name] = literal(input.value);
    }
    const timeout = Number(this._timeout.value);
    return {
      notebook: this.path,
      scheduler: this._scheduler.value || null,
      parameters,
      cfg,
      image: this._image.value.trim() || null,
      resource: this._resource.value.trim() || null,
      cell_timeout: this._timeout.value && timeout > 0 ? timeout : null
    };
  }

  private _scheduler: HTMLSelectElement;
  private _image: HTMLInputElement;
  private _resource: HTMLInputElement;
  private _cfg: HTMLInputElement;
  private _timeout: HTMLInputElement;
  private _params: HTMLInputElement[] = [];
}
