/** Small DOM and text helpers shared by the panel and the job view. Text always goes in through
 * textContent: job names, messages and logs come from users and jobs, never as HTML. */

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className = '',
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

export function badge(state: string): HTMLElement {
  const node = el('span', `tnb-badge tnb-state-${state.toLowerCase()}`, state);
  node.title = state;
  return node;
}

/** A chip for a job that ran more than once: `preempted ×2 · attempt 3` (null otherwise). */
export function attemptChip(attempt?: number, preemptions?: number): HTMLElement | null {
  const n = attempt ?? 1;
  const p = preemptions ?? 0;
  if (n < 2 && !p) {
    return null;
  }
  const text = [p ? `preempted ×${p}` : '', `attempt ${n}`].filter(Boolean).join(' · ');
  const node = el('span', 'tnb-attempts', text);
  node.title = `${p} preemption${p === 1 ? '' : 's'}: it runs again from its checkpoint (attempt ${n})`;
  return node;
}

/** Duration as the CLI and the widgets print it: m:ss or h:mm:ss. */
export function duration(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = String(s % 60).padStart(2, '0');
  return h ? `${h}:${String(m).padStart(2, '0')}:${sec}` : `${m}:${sec}`;
}

/** A submit time: the time of day for today, the date otherwise. */
export function submitted(epochSeconds: number): string {
  const date = new Date(epochSeconds * 1000);
  const now = new Date();
  if (date.toDateString() === now.toDateString()) {
    return date.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
  }
  return date.toLocaleDateString([], { year: 'numeric', month: 'short', day: 'numeric' });
}

export function basename(path: string): string {
  const parts = path.split('/');
  return parts[parts.length - 1] || path;
}

/** A byte count as the CLI prints it: B, kB, MB, GB (powers of 1000). */
export function size(bytes: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit += 1;
  }
  return unit ? `${value.toFixed(1)} ${units[unit]}` : `${bytes} B`;
}
