/**
 * torchx_nb's JupyterLab extension: a left-sidebar panel listing every job (from any notebook,
 * the CLI or the Python API) live, a job view with replicas and followed logs, Cancel with
 * confirmation, and a status-bar item with the running count. It talks only to the REST API of
 * the `torchx_nb.server` Jupyter server extension. Works in JupyterLab 4 and Notebook 7.
 */
import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  Dialog,
  ICommandPalette,
  MainAreaWidget,
  Notification,
  showDialog,
  ToolbarButton,
  WidgetTracker
} from '@jupyterlab/apputils';
import { IFileBrowserFactory } from '@jupyterlab/filebrowser';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { LabIcon } from '@jupyterlab/ui-components';

import {
  cancelJob,
  fetchExecutedNotebook,
  getParameters,
  getSchedulers,
  IJob,
  submitNotebook
} from './api';
import { JobView } from './detail';
import { JobsModel } from './model';
import { JobsPanel } from './panel';
import { RunNotebookForm } from './runDialog';
import { RunningItem } from './status';

const ICON = new LabIcon({
  name: 'torchx-nb:jobs',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161">' +
    '<path d="M4 4h16v3H4zM4 10.5h16v3H4zM4 17h16v3H4z" opacity=".35"/>' +
    '<path d="M6 5.5a1 1 0 1 0 0 .01zM6 12a1 1 0 1 0 0 .01zM6 18.5a1 1 0 1 0 0 .01z"/>' +
    '<path d="M9 5h9v1H9zM9 11.5h9v1H9zM9 18h9v1H9z"/></g></svg>'
});

export const COMMANDS = {
  open: 'torchx-nb:open-panel',
  openJob: 'torchx-nb:open-job',
  refresh: 'torchx-nb:refresh',
  runNotebook: 'torchx-nb:run-notebook'
};

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'torchx-nb:plugin',
  description: 'The TorchX jobs panel, job view and status-bar item.',
  autoStart: true,
  optional: [
    ILayoutRestorer,
    IStatusBar,
    ICommandPalette,
    ILabShell,
    ISettingRegistry,
    IFileBrowserFactory,
    INotebookTracker
  ],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    statusBar: IStatusBar | null,
    palette: ICommandPalette | null,
    labShell: ILabShell | null,
    settingRegistry: ISettingRegistry | null,
    browsers: IFileBrowserFactory | null,
    notebooks: INotebookTracker | null
  ) => {
    const model = new JobsModel();
    // a failure told in a dialog: its title, and the server's one-line reason
    const tell = (title: string, e: unknown): void => {
      void showDialog({ title, body: (e as Error).message, buttons: [Dialog.okButton()] });
    };
    const views = new Map<string, MainAreaWidget<JobView>>();
    const tracker = new WidgetTracker<MainAreaWidget<JobView>>({ namespace: 'torchx-nb-job' });

    const openNotebook = (path: string): void => {
      void app.commands.execute('docmanager:open', { path });
    };
    const cancel = async (job: IJob): Promise<void> => {
      const result = await showDialog({
        title: 'Cancel job?',
        body: `Cancel ${job.name} (${job.handle}) on ${job.scheduler}? Its replicas are stopped.`,
        buttons: [
          Dialog.cancelButton({ label: 'Keep running' }),
          Dialog.warnButton({ label: 'Cancel job' })
        ],
        defaultButton: 0
      });
      if (!result.button.accept) {
        return;
      }
      try {
        await cancelJob(job.handle);
      } catch (e) {
        tell('Cancel failed', e);
      }
    };
    const openExecuted = async (handle: string): Promise<void> => {
      try {
        const fetched = await fetchExecutedNotebook(handle);
        openNotebook(fetched.path);
      } catch (e) {
        tell('No executed notebook', e);
      }
    };
    const openJob = (handle: string): void => {
      let view = views.get(handle);
      if (!view || view.isDisposed) {
        const content = new JobView(handle, model, { openNotebook, cancel, openExecuted });
        view = new MainAreaWidget({ content });
        view.id = `${content.id}-tab`;
        view.title.label = content.title.label;
        view.title.caption = handle;
        view.title.icon = ICON;
        view.title.closable = true;
        views.set(handle, view);
        view.disposed.connect(() => views.delete(handle));
        // Notebook 7's main area holds only its document: the job opens beside it there.
        app.shell.add(view, labShell ? 'main' : 'right', { rank: 900 });
        void tracker.add(view);
      }
      app.shell.activateById(view.id);
    };

    // one notification per job end seen live, in Lab's notification center, with a way to
    // the job's view (a failure stays until dismissed)
    // opt-in (the panel's settings): also a browser notification while this tab is hidden
    let browserNotices = false;
    void settingRegistry?.load(plugin.id).then(settings => {
      const read = (): void => {
        browserNotices = settings.get('browserNotifications').composite === true;
        if (browserNotices && 'Notification' in window && window.Notification.permission === 'default') {
          void window.Notification.requestPermission();
        }
      };
      read();
      settings.changed.connect(read);
    });
    model.jobEnded.connect((_, job) => {
      const type =
        job.state === 'SUCCEEDED' ? 'success' : job.state === 'FAILED' ? 'error' : 'info';
      const text = `${job.name} ${job.state} (${job.scheduler})`;
      Notification.emit(text, type, {
        autoClose: job.state === 'FAILED' ? false : 8000,
        actions: [{ label: 'Open', callback: () => openJob(job.handle) }]
      });
      if (
        browserNotices &&
        document.visibilityState === 'hidden' &&
        'Notification' in window &&
        window.Notification.permission === 'granted'
      ) {
        const note = new window.Notification(`TorchX: ${text}`, { body: job.handle, tag: job.handle });
        note.onclick = () => {
          window.focus();
          openJob(job.handle);
        };
      }
    });

    const panel = new JobsPanel(model, { openJob, openNotebook, cancel });
    panel.title.icon = ICON;
    app.shell.add(panel, 'left', { rank: 850 });
    restorer?.add(panel, 'torchx-nb-jobs');
    void model.refresh();

    app.commands.addCommand(COMMANDS.open, {
      label: 'Show TorchX Jobs',
      caption: 'The jobs panel',
      execute: () => app.shell.activateById(panel.id)
    });
    app.commands.addCommand(COMMANDS.openJob, {
      label: 'Open TorchX Job',
      execute: args => openJob(String(args.handle))
    });
    void restorer?.restore(tracker, {
      command: COMMANDS.openJob,
      args: view => ({ handle: view.content.handle }),
      name: view => view.content.handle
    });
    app.commands.addCommand(COMMANDS.refresh, {
      label: 'Refresh TorchX Jobs',
      execute: () => model.refresh()
    });
    // "Run as job…": the notebook under the file browser's cursor, else the current one
    const runNotebook = async (path: string): Promise<void> => {
      let form: RunNotebookForm;
      try {
        const [schedulers, cell] = await Promise.all([getSchedulers(), getParameters(path)]);
        form = new RunNotebookForm(path, schedulers, cell);
      } catch (e) {
        tell('Cannot run this notebook', e);
        return;
      }
      const result = await showDialog({
        title: `Run ${path.split('/').pop()} as a job`,
        body: form,
        buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Run' })]
      });
      if (!result.button.accept || !result.value) {
        return;
      }
      try {
        const job = await submitNotebook(result.value);
        Notification.emit(`${job.name} submitted to ${job.scheduler}`, 'info', {
          autoClose: 5000,
          actions: [{ label: 'Open', callback: () => openJob(job.handle) }]
        });
        void model.refresh();
        openJob(job.handle);
      } catch (e) {
        tell('The job was not submitted', e);
      }
    };
    const selectedNotebook = (): string | null => {
      const item = browsers?.tracker.currentWidget?.selectedItems().next();
      const model = item && !item.done ? item.value : null;
      if (model && model.type === 'notebook') {
        return model.path;
      }
      return notebooks?.currentWidget?.context.path ?? null;
    };
    app.commands.addCommand(COMMANDS.runNotebook, {
      label: 'Run as Job…',
      caption: 'Run the whole notebook as a TorchX job',
      icon: ICON,
      isEnabled: () => selectedNotebook() !== null,
      execute: args => {
        const path = args.path ? String(args.path) : selectedNotebook();
        if (path) {
          void runNotebook(path);
        }
      }
    });
    app.contextMenu.addItem({
      command: COMMANDS.runNotebook,
      selector: '.jp-DirListing-item[data-file-type="notebook"]',
      rank: 4
    });
    notebooks?.widgetAdded.connect((_, panel) => {
      const button = new ToolbarButton({
        icon: ICON,
        label: 'Run as Job',
        className: 'tnb-run-as-job',
        tooltip: 'Run this notebook as a TorchX job',
        onClick: () => void runNotebook(panel.context.path)
      });
      panel.toolbar.insertItem(10, 'torchxRunAsJob', button);
    });
    palette?.addItem({ command: COMMANDS.runNotebook, category: 'TorchX' });
    palette?.addItem({ command: COMMANDS.open, category: 'TorchX' });
    palette?.addItem({ command: COMMANDS.refresh, category: 'TorchX' });

    if (statusBar) {
      statusBar.registerStatusItem('torchx-nb:running', {
        item: new RunningItem(model, () => app.shell.activateById(panel.id)),
        align: 'left',
        rank: 5
      });
    }
  }
};

export default plugin;
