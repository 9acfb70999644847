/**
 * "Run as job…": a dialog body asking how to run a notebook (scheduler, its parameters
 * pre-filled from the cell tagged `parameters` as the server's Python parser reads it, image,
 * named resource, options, cell time limit), and what it becomes as a `POST /jobs` body.
 *
 * A parameter is sent only when the user changed it, as the text typed (`typed_parameters`):
 * the server reads it as `run-notebook -p` does (a Python literal, else the text itself). A
 * value left alone is never sent, so the notebook keeps its own `n = 1_000`, its multi-line
 * dict and its `'http://x/#frag'` exactly as written. The options (`-cfg`) are sent as typed
 * too (`typed_cfg`), for the CLI's own parser to read: a value holding `,` or `=` stays whole.
 */
import { Widget } from '@lumino/widgets';

import { INotebookParameters, INotebookSubmission, ISchedulers } from './api';
import { el } from './format';

const SECRET = /(pass(word)?|secret|token|api[_-]?key|credential|private[_-]?key)/i;

/** The legend over the parameters: what the notebook's parameters cell gave. */
function legend(cell: INotebookParameters): string {
  if (!cell.cell) {
    return 'Parameters (no cell tagged "parameters")';
  }
  if (cell.error) {
    return `Parameters (the cell tagged "parameters" is not valid Python: ${cell.error})`;
  }
  if (!cell.parameters.length) {
    return 'Parameters (the cell tagged "parameters" assigns none)';
  }
  return 'Parameters';
}

export class RunNotebookForm extends Widget {
  constructor(
    readonly path: string,
    schedulers: ISchedulers,
    cell: INotebookParameters
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
    this._cfg.placeholder = 'k=v,k2=v2 (as -cfg takes them)';
    this._timeout = el('input', 'tnb-run-timeout jp-mod-styled');
    this._timeout.type = 'number';
    this._timeout.min = '1';
    this._timeout.placeholder = 'none';
    const params = el('fieldset', 'tnb-run-params');
    params.append(el('legend', '', legend(cell)));
    if (cell.parameters.length) {
      params.append(
        el(
          'div',
          'tnb-run-hint',
          'Only the values you change are sent, each read as -p reads it: a Python literal, else text.'
        )
      );
    }
    for (const { name, value } of cell.parameters) {
      // a value written over several lines keeps its lines (an <input> would drop them)
      const input: HTMLInputElement | HTMLTextAreaElement =
        value.includes('\n') && !SECRET.test(name)
          ? el('textarea', 'tnb-run-param jp-mod-styled')
          : el('input', 'tnb-run-param jp-mod-styled');
      input.name = name;
      input.value = value;
      if (input instanceof HTMLTextAreaElement) {
        input.rows = Math.min(8, value.split('\n').length);
      } else if (SECRET.test(name)) {
        input.type = 'password';
      }
      if (!value) {
        input.placeholder = 'as the notebook sets it';
      }
      input.setAttribute('aria-label', name);
      input.spellcheck = false;
      const initial = input.value; // as the element holds it: unchanged means not sent
      input.addEventListener('input', () =>
        input.classList.toggle('tnb-run-changed', input.value !== initial)
      );
      this._params.push([input, initial]);
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
    const typed: Record<string, string> = {};
    for (const [input, initial] of this._params) {
      if (input.value !== initial) {
        typed[input.name] = input.value; // exactly as typed: the server reads it as -p does
      }
    }
    const timeout = Number(this._timeout.value);
    return {
      notebook: this.path,
      scheduler: this._scheduler.value || null,
      typed_parameters: typed,
      // as typed: the server reads it with the CLI's -cfg parser (quotes, commas in values)
      typed_cfg: this._cfg.value.trim() || null,
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
  private _params: [HTMLInputElement | HTMLTextAreaElement, string][] = [];
}
