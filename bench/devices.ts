// Device API under load, each figure beside a bare uWebSockets.js handler that answers the same
// JSON from memory (bench/lib/bare-server.ts), measured in the same run:
//   - POST /device?count=10000, ten times (seconds each; 100,000 devices in the end);
//   - GET /device/{random id} over all 100,000 devices: req/s and p99;
//   - GET /device pages (plain, deep, sorted, filtered) at that size.
// Run: npm run build && node dist/bench/devices.js [seconds per case]
import { load, table, type LoadResult } from './lib/load.js';
import { startBareProcess, startBenchService } from './lib/harness.js';

const SECONDS = Number(process.argv[2] ?? 10);
const BATCHES = 10;
const COUNT = 10_000;
const CONNECTIONS = 50;

const svc = await startBenchService();
const auth = { authorization: `Bearer ${svc.token}` };
const api = async (method: string, path: string, body?: unknown): Promise<{ status: number; text: string }> => {
  const res = await fetch(svc.base + path, {
    method,
    headers: body === undefined ? auth : { ...auth, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
};

// The bare server is a process of its own: stopped in `finally` too, or a failure after its
// start would leave it listening after the benchmark ended.
let bare: Awaited<ReturnType<typeof startBareProcess>> | undefined;
try {
  const tpl = await api('POST', '/template', {
    label: 'Thermometer',
    attrs: [
      { label: 'temperature', type: 'dynamic', value_type: 'float' },
      {
        label: 'serial',
        type: 'static',
        value_type: 'string',
        static_value: 'SN-0',
        metadata: [{ label: 'unit', type: 'static', value_type: 'string', static_value: 'C' }],
      },
      { label: 'led', type: 'actuator', value_type: 'bool' },
      { label: 'vendor', type: 'static', value_type: 'string', static_value: 'acme' },
    ],
  });
  const templateId = (JSON.parse(tpl.text) as { template: { id: number } }).template.id;

  // Creation: ten requests of 10,000 devices, each one transaction of set-based statements.
  const createSeconds: number[] = [];
  let lastCreate = '';
  for (let i = 0; i < BATCHES; i++) {
    const t0 = performance.now();
    const res = await api('POST', `/device?count=${COUNT}`, { label: `sensor-${i}`, templates: [templateId] });
    createSeconds.push((performance.now() - t0) / 1000);
    if (res.status !== 200) throw new Error(`create failed: ${res.status} ${res.text.slice(0, 200)}`);
    lastCreate = res.text;
  }
  console.log(`created ${BATCHES * COUNT} devices: ${createSeconds.map((s) => s.toFixed(2)).join(', ')} s`);

  // What the bare server will answer: every device view, and the list pages measured below.
  const answers: Record<string, string> = { '/device-create': lastCreate };
  const ids: string[] = [];
  for (let page = 1; ; page++) {
    const res = await api('GET', `/device?page_size=1000&page_num=${page}`);
    const body = JSON.parse(res.text) as { devices: Array<{ id: string }>; pagination: { has_next: boolean } };
    for (const d of body.devices) {
      ids.push(d.id);
      answers[`/device/${d.id}`] = JSON.stringify(d);
    }
    if (!body.pagination.has_next) break;
  }
  // One device with its own serial (an override): the sparse attr= case.
  const marked = ids[Math.floor(ids.length / 2)]!;
  const put = await api('PUT', `/device/${marked}`, {
    label: 'marked',
    templates: [templateId],
    attrs: [{ label: 'serial', static_value: 'SN-UNIQUE' }],
  });
  if (put.status !== 200) throw new Error(`update failed: ${put.status} ${put.text.slice(0, 200)}`);
  answers[`/device/${marked}`] = JSON.stringify((JSON.parse(put.text) as { device: unknown }).device);
  const lists = [
    '/device',
    '/device?page_num=2500',
    '/device?sortBy=label&page_num=100',
    '/device?label=sensor-3_99',
    '/device?attr=serial=SN-0&page_num=10',
    '/device?attr=serial=SN-UNIQUE',
    '/device?attr=serial=nobody',
    '/device?attr_type=actuator&page_num=10',
    `/device/template/${templateId}?page_num=10`,
  ];
  for (const path of lists) answers[path] = (await api('GET', path)).text;
  bare = await startBareProcess(answers);

  // Bare: the 10,000-device creation answer from memory, for scale.
  const t0 = performance.now();
  await (await fetch(`${bare.base}/device-create`)).text();
  const bareCreateMs = performance.now() - t0;

  // Warm the service's view cache: one read of every device.
  let next = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < ids.length) await api('GET', `/device/${ids[next++]}`);
    }),
  );
  const metrics = await (await fetch(`${svc.base}/metrics`)).text();
  const rssMb = Number(/^process_resident_memory_bytes (\S+)/m.exec(metrics)?.[1] ?? 0) / 2 ** 20;

  const randomPath = () => `/device/${ids[Math.floor(Math.random() * ids.length)]}`;
  const byId: LoadResult[] = [];
  for (let round = 1; round <= 2; round++) {
    byId.push(
      await load({
        name: `bare GET /device/{id} #${round}`,
        url: bare.base + '/',
        seconds: SECONDS,
        connections: CONNECTIONS,
        path: randomPath,
      }),
    );
    byId.push(
      await load({
        name: `service GET /device/{id} #${round}`,
        url: svc.base + '/',
        token: svc.token,
        seconds: SECONDS,
        connections: CONNECTIONS,
        path: randomPath,
      }),
    );
  }
  const listed: LoadResult[] = [];
  for (const path of lists) {
    listed.push(await load({ name: `bare ${path}`, url: bare.base + path, seconds: Math.ceil(SECONDS / 2), connections: CONNECTIONS }));
    listed.push(
      await load({
        name: `service ${path}`,
        url: svc.base + path,
        token: svc.token,
        seconds: Math.ceil(SECONDS / 2),
        connections: CONNECTIONS,
      }),
    );
  }
  await bare.stop();
  bare = undefined;

  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const bareRps = mean(byId.filter((r) => r.name.startsWith('bare')).map((r) => r.rps));
  const svcRps = mean(byId.filter((r) => r.name.startsWith('service')).map((r) => r.rps));
  console.log(`\n## POST /device?count=${COUNT}\n`);
  console.log(
    `service: ${createSeconds.map((s) => s.toFixed(2)).join(', ')} s (mean ${mean(createSeconds).toFixed(2)} s); bare answer of the same JSON: ${bareCreateMs.toFixed(1)} ms`,
  );
  console.log(
    `\n## GET /device/{id}, ${ids.length} devices, ${CONNECTIONS} connections, ${SECONDS} s per run; service RSS after warm-up ${rssMb.toFixed(0)} MiB\n`,
  );
  console.log(table(byId));
  console.log(`\nratio service/bare (mean req/s): ${(svcRps / bareRps).toFixed(2)}`);
  console.log(`\n## GET /device pages (20 devices each), ${ids.length} devices\n`);
  console.log(table(listed));
  for (let i = 0; i < listed.length; i += 2)
    console.log(`${lists[i / 2]}: service/bare ${(listed[i + 1]!.rps / listed[i]!.rps).toFixed(3)}`);
} finally {
  await bare?.stop();
  await svc.stop();
}
