/** The status-bar item: how many jobs are running (and waiting); a click opens the panel. */
import { Widget } from '@lumino/widgets';

import { JobsModel } from './model';

export class RunningItem extends Widget {
  constructor(
    private model: JobsModel,
    onClick: () => void
  ) {
    super();
    this.addClass('tnb-status');
    this.node.title = 'TorchX jobs: running / waiting';
    this.node.onclick = onClick;
    model.changed.connect(this._render, this);
    this._render();
  }

  private _render(): void {
    const running = this.model.running;
    const waiting = this.model.active - running;
    this.node.textContent =
      `TorchX: ${running} running` + (waiting > 0 ? `, ${waiting} waiting` : '');
    this.node.dataset.running = String(running);
  }
}
