// Template list and get latency with 100,000 templates in one tenant, against GET /health of
// the same service in the same run (the cheapest authenticated-free route that touches the
// database). Run: npm run build && node dist/bench/templates.js [templates] [seconds]
import { load, table, type LoadResult } from './lib/load.js';
import { startBenchService } from './lib/harness.js';
import { seedTemplates, templateIds } from './lib/seed.js';

const N = Number(process.argv[2] ?? 100_000);
const SECONDS = Number(process.argv[3] ?? 5);
const CONNECTIONS = 20;

const svc = await startBenchService();
try {
  const t0 = performance.now();
  await seedTemplates(svc.pool, 'admin', N);
  const ids = await templateIds(svc.pool, 'admin');
  console.log(`seeded ${ids.length} templates (3 attributes each) in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  const randomId = () => ids[Math.floor(Math.random() * ids.length)]!;
  const deepPage = Math.floor(N / 20 / 2);
  const cases: Array<{ name: string; path: string | (() => string); auth?: boolean }> = [
    { name: 'GET /health', path: '/health', auth: false },
    { name: 'GET /template', path: '/template' },
    { name: `GET /template?page_num=${deepPage}`, path: `/template?page_num=${deepPage}` },
    { name: 'GET /template?sortBy=label&page_num=100', path: '/template?sortBy=label&page_num=100' },
    { name: 'GET /template?label=model-ab (prefix)', path: '/template?label=model-ab' },
    { name: 'GET /template?label=-gamma (suffix)', path: '/template?label=-gamma' },
    { name: 'GET /template?attr=vendor=vendor-42', path: '/template?attr=vendor=vendor-42' },
    { name: 'GET /template?attr_type=meta', path: '/template?attr_type=meta' },
    { name: 'GET /template?attr_type=psk (none)', path: '/template?attr_type=psk' },
    { name: 'GET /template?page_size=100&attr_format=single', path: '/template?page_size=100&attr_format=single' },
    { name: 'GET /template/{random id}', path: () => `/template/${randomId()}` },
  ];
  const results: LoadResult[] = [];
  for (const c of cases) {
    const fixed = typeof c.path === 'string' ? c.path : undefined;
    results.push(
      await load({
        name: c.name,
        url: svc.base + (fixed ?? '/'),
        token: c.auth === false ? undefined : svc.token,
        seconds: SECONDS,
        connections: CONNECTIONS,
        path: typeof c.path === 'function' ? c.path : undefined,
      }),
    );
    console.log(`${c.name}: ${results.at(-1)!.rps} req/s, p99 ${results.at(-1)!.p99} ms`);
  }
  // The view cache fills as templates are read; warm it (every template, through list pages)
  // and measure the random reads again.
  for (let page = 1; page <= Math.ceil(N / 1000); page++) {
    const res = await fetch(`${svc.base}/template?page_size=1000&page_num=${page}`, { headers: { authorization: `Bearer ${svc.token}` } });
    await res.text();
  }
  const warm = 'GET /template/{random id}, every view cached';
  results.push(
    await load({
      name: warm,
      url: `${svc.base}/`,
      token: svc.token,
      seconds: SECONDS,
      connections: CONNECTIONS,
      path: () => `/template/${randomId()}`,
    }),
  );
  console.log(`${warm}: ${results.at(-1)!.rps} req/s, p99 ${results.at(-1)!.p99} ms`);
  const metrics = await (await fetch(`${svc.base}/metrics`)).text();
  const rssMb = Number(/^process_resident_memory_bytes (\S+)/m.exec(metrics)?.[1] ?? 0) / 2 ** 20;
  console.log(
    `\n${N} templates, ${CONNECTIONS} connections, ${SECONDS} s per case; service RSS with every view cached ${rssMb.toFixed(0)} MiB\n`,
  );
  console.log(table(results, results[0]));
} finally {
  await svc.stop();
}
